"""`pii detect` measured on a labelled Faker corpus (see pii_corpus.py).

Every document goes through one `code-execution-mcp pii detect` process, one JSON
string per line in, one JSON list of entities per line out.  Per type it counts

* true positives: a detection of the right type whose span equals a label's, and
  ("relaxed", counted apart) one that overlaps a label of the same type and differs
  from it only by punctuation or whitespace at the edges;
* false negatives: labels no detection matched;
* false positives: detections that matched no label, every detection in the
  clean corpus among them.

Each label is matched by at most one detection.  Faker phone numbers that are a
bare run of digits are scored as their own bucket, "phone_bare", and stay out of
the overall figures.  The table is printed and written to
target/pii-corpus-report.json.
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest

import pii_corpus
from conftest import BIN, REPO

REPORT = REPO / "target" / "pii-corpus-report.json"
RECALL_TARGET = 0.99
PRECISION_TARGET = 0.99
SHOW = 30  # misses and false positives printed when an assertion fails
MAIN = pii_corpus.TYPES  # the buckets the targets apply to


@dataclass
class Det:
    type: str
    start: int
    end: int
    text: str


@dataclass
class Run:
    entity: list[pii_corpus.Doc]
    clean: list[pii_corpus.Doc]
    dets: list[list[Det]]  # per document, entity documents first
    malformed: list[str]
    rows: dict[str, Counter]
    misses: list[dict] = field(default_factory=list)
    false_positives: list[dict] = field(default_factory=list)
    relaxed: list[dict] = field(default_factory=list)
    report: dict = field(default_factory=dict)
    table: str = ""


# --------------------------------------------------------------------------- running the detector


def pii_detect(texts: list[str], *args: str) -> list[list]:
    payload = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_EXECUTION_MCP_")}
    try:
        proc = subprocess.run([str(BIN), "pii", "detect", *args], input=payload, capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=900, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{BIN.name} pii detect` took more than 900 s for {len(texts)} documents")
    if proc.returncode != 0:
        pytest.fail(f"`{BIN.name} pii detect {' '.join(args)}` exited {proc.returncode}\nstderr:\n{proc.stderr[-4000:]}")
    # Split on "\n" only: str.splitlines() would also split inside strings on U+2028, U+0085...
    lines = proc.stdout.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(texts):
        pytest.fail(f"`pii detect` wrote {len(lines)} lines for {len(texts)} input lines\n"
                    f"first lines: {lines[:3]!r}\nstderr:\n{proc.stderr[-2000:]}")
    out = []
    for n, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except ValueError as e:
            pytest.fail(f"output line {n + 1} is not JSON ({e}): {line[:300]!r}")
    return out


def parse_dets(raw: list, text: str, where: str, malformed: list[str]) -> list[Det]:
    if not isinstance(raw, list):
        malformed.append(f"{where}: expected a JSON list, got {str(raw)[:200]}")
        return []
    dets = []
    for ent in raw:
        if not (isinstance(ent, dict) and isinstance(ent.get("type"), str) and isinstance(ent.get("start"), int)
                and isinstance(ent.get("end"), int) and isinstance(ent.get("text"), str)):
            malformed.append(f"{where}: entity without type/start/end/text: {str(ent)[:200]}")
            continue
        d = Det(ent["type"], ent["start"], ent["end"], ent["text"])
        if not 0 <= d.start < d.end <= len(text):
            malformed.append(f"{where}: span [{d.start}:{d.end}] outside the document (length {len(text)}): {ent}")
            continue
        if text[d.start:d.end] != d.text:
            malformed.append(f"{where}: text {d.text!r} != doc[{d.start}:{d.end}] {text[d.start:d.end]!r} "
                             "(start/end must be code-point indices)")
        if d.type not in pii_corpus.TYPES:
            malformed.append(f"{where}: unknown type {d.type!r}")
        dets.append(d)
    return dets


# --------------------------------------------------------------------------- scoring


def only_punct(s: str) -> bool:
    return all(ch.isspace() or ch in string.punctuation or unicodedata.category(ch)[0] in "PZ" for ch in s)


def snippet(text: str, start: int, end: int, width: int = 45) -> str:
    left = text[max(0, start - width):start]
    right = text[end:end + width]
    return repr(("…" if start > width else "") + left + "⟦" + text[start:end] + "⟧" + right
                + ("…" if end + width < len(text) else ""))


def score(entity: list[pii_corpus.Doc], clean: list[pii_corpus.Doc], dets: list[list[Det]], malformed: list[str]) -> Run:
    rows: dict[str, Counter] = {b: Counter() for b in pii_corpus.BUCKETS}
    run = Run(entity, clean, dets, malformed, rows)
    for n, (doc, ds) in enumerate(zip(entity + clean, dets)):
        labels = doc.labels
        for lb in labels:
            rows[lb.bucket]["entities"] += 1
        claimed: list[tuple[str, int] | None] = [None] * len(labels)
        matched: list[int | None] = [None] * len(ds)
        for i, d in enumerate(ds):  # exact spans
            for j, lb in enumerate(labels):
                if claimed[j] is None and lb.type == d.type and (lb.start, lb.end) == (d.start, d.end):
                    claimed[j], matched[i] = ("exact", i), j
                    break
        for i, d in enumerate(ds):  # same type, overlapping, differing only by punctuation/whitespace at the edges
            if matched[i] is not None:
                continue
            for j, lb in enumerate(labels):
                if claimed[j] is not None or lb.type != d.type or d.end <= lb.start or lb.end <= d.start:
                    continue
                edges = (doc.text[min(d.start, lb.start):max(d.start, lb.start)]
                         + doc.text[min(d.end, lb.end):max(d.end, lb.end)])
                if only_punct(edges):
                    claimed[j], matched[i] = ("relaxed", i), j
                    run.relaxed.append({"doc": n, "bucket": lb.bucket, "variant": lb.variant,
                                        "label": doc.text[lb.start:lb.end], "detected": d.text,
                                        "context": snippet(doc.text, lb.start, lb.end)})
                    break
        for j, lb in enumerate(labels):
            if claimed[j] is None:
                rows[lb.bucket]["fn"] += 1
                near = [d for d in ds if d.start < lb.end and lb.start < d.end]
                got = ("nothing" if not near else
                       "partial" if any(d.type == lb.type for d in near) else "other type")
                run.misses.append({"doc": n, "start": lb.start, "bucket": lb.bucket, "variant": lb.variant,
                                   "kind": lb.kind, "locale": lb.locale,
                                   "context_kind": doc.context, "label": doc.text[lb.start:lb.end], "got": got,
                                   "overlapping": [f"{d.type} {d.text!r}" for d in near],
                                   "context": snippet(doc.text, lb.start, lb.end)})
            else:
                rows[lb.bucket]["tp_" + claimed[j][0]] += 1
        for i, d in enumerate(ds):
            if matched[i] is not None:
                continue
            rows.setdefault(d.type, Counter())["fp"] += 1
            inside = [j for j, lb in enumerate(labels) if lb.start < d.end and d.start < lb.end]
            same = [j for j in inside if labels[j].type == d.type]
            if doc.corpus == "clean":
                where = f"clean:{doc.context}"
            elif same and claimed[same[0]] is None:
                where = f"wrong span of a {labels[same[0]].bucket} label"
            elif same:
                where = f"second detection on a matched {labels[same[0]].bucket} label"
            elif inside:
                where = f"inside a {labels[inside[0]].bucket} label"
            else:
                where = f"{doc.context} text outside labels"
            run.false_positives.append({"doc": n, "type": d.type, "text": d.text, "corpus": doc.corpus,
                                        "context_kind": doc.context, "where": where,
                                        "overlapping": [f"{labels[j].bucket} {doc.text[labels[j].start:labels[j].end]!r}"
                                                        for j in inside],
                                        "context": snippet(doc.text, d.start, d.end)})
    return run


def ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def summarize(run: Run) -> None:
    rows = run.rows
    table_rows = []
    for bucket in list(MAIN) + ["phone_bare"] + [t for t in rows if t not in pii_corpus.BUCKETS]:
        c = rows[bucket]
        tp = c["tp_exact"] + c["tp_relaxed"]
        table_rows.append({"type": bucket, "entities": c["entities"], "tp_exact": c["tp_exact"],
                           "tp_relaxed": c["tp_relaxed"], "fn": c["fn"], "fp": c["fp"],
                           "recall": ratio(tp, tp + c["fn"]), "precision": ratio(tp, tp + c["fp"])})
    tp = sum(rows[b]["tp_exact"] + rows[b]["tp_relaxed"] for b in MAIN)
    fn = sum(rows[b]["fn"] for b in MAIN)
    fp = sum(c["fp"] for c in rows.values())
    overall = {"type": "overall", "entities": sum(rows[b]["entities"] for b in MAIN),
               "tp_exact": sum(rows[b]["tp_exact"] for b in MAIN), "tp_relaxed": sum(rows[b]["tp_relaxed"] for b in MAIN),
               "fn": fn, "fp": fp, "recall": ratio(tp, tp + fn), "precision": ratio(tp, tp + fp)}

    fmt = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
    lines = [f"{'type':<12} {'entities':>8} {'recall':>7} {'precision':>9}   {'tp':>5} {'relaxed':>7} {'fn':>5} {'fp':>5}"]
    for r in table_rows[:len(MAIN)] + [overall] + table_rows[len(MAIN):]:
        if r["type"] == "overall":
            lines.append("-" * 68)
        lines.append(f"{r['type']:<12} {r['entities']:>8} {fmt(r['recall']):>7} {fmt(r['precision']):>9}   "
                     f"{r['tp_exact'] + r['tp_relaxed']:>5} {r['tp_relaxed']:>7} {r['fn']:>5} {r['fp']:>5}")
        if r["type"] == "overall":
            lines.append("-" * 68)
    clean_hits = [f for f in run.false_positives if f["corpus"] == "clean"]
    lines.append(f"clean corpus: {len(run.clean)} documents, {len(clean_hits)} detection(s); "
                 f"phone_bare is outside the overall figures")
    run.table = "\n".join(lines)

    def by(items: list[dict], *keys: str) -> dict[str, int]:
        return dict(Counter(" / ".join(str(it[k]) for k in keys) for it in items).most_common())

    per_variant: dict[str, Counter] = defaultdict(Counter)
    per_locale: dict[str, Counter] = defaultdict(Counter)
    per_kind: dict[str, Counter] = defaultdict(Counter)
    missed = {(m["doc"], m["start"]) for m in run.misses}
    for n, doc in enumerate(run.entity):
        for lb in doc.labels:
            hit = (n, lb.start) not in missed
            keys = [(per_variant, f"{lb.bucket}/{lb.variant}"), (per_locale, f"{lb.bucket}/{lb.locale}")]
            if lb.kind:
                keys.append((per_kind, f"{lb.bucket}/{lb.kind}"))
            for table, key in keys:
                table[key]["entities"] += 1
                table[key]["found"] += hit
    run.report = {
        "faker": pii_corpus.faker.VERSION, "seed": pii_corpus.SEED, "binary": str(BIN),
        "documents": {"entity": len(run.entity), "clean": len(run.clean)},
        "targets": {"recall": RECALL_TARGET, "precision": PRECISION_TARGET, "clean_detections": 0},
        "table": table_rows[:len(MAIN)], "overall": overall, "sub_buckets": table_rows[len(MAIN):],
        "recall_by_variant": {k: {**v, "recall": ratio(v["found"], v["entities"])} for k, v in sorted(per_variant.items())},
        "recall_by_kind": {k: {**v, "recall": ratio(v["found"], v["entities"])} for k, v in sorted(per_kind.items())},
        "recall_by_locale": {k: {**v, "recall": ratio(v["found"], v["entities"])} for k, v in sorted(per_locale.items())},
        "misses_by_kind": by(run.misses, "bucket", "variant", "got"),
        "false_positives_by_kind": by(run.false_positives, "type", "where"),
        "clean_detections_by_category": by(clean_hits, "context_kind", "type"),
        "relaxed_matches_by_kind": by(run.relaxed, "bucket", "variant"),
        "malformed": run.malformed[:200],
        "misses": [m for m in run.misses if m["bucket"] in MAIN][:300],
        "phone_bare_misses": [m for m in run.misses if m["bucket"] not in MAIN][:50],
        "false_positives": run.false_positives[:300], "relaxed": run.relaxed[:100],
    }


@pytest.fixture(scope="module")
def run() -> Run:
    entity, clean = pii_corpus.corpus()
    problems = pii_corpus.self_check(entity, clean)
    assert not problems, "the corpus itself is unsound:\n" + "\n".join(problems[:30])
    docs = entity + clean
    raw = pii_detect([d.text for d in docs])
    malformed: list[str] = []
    dets = [parse_dets(r, d.text, f"doc {n} ({d.corpus}/{d.context})", malformed) for n, (r, d) in enumerate(zip(raw, docs))]
    result = score(entity, clean, dets, malformed)
    summarize(result)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(result.report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return result


def listing(title: str, items: list[dict], fmt) -> str:
    if not items:
        return f"{title}: none"
    lines = [f"{title} (first {min(SHOW, len(items))} of {len(items)}):"]
    lines += ["  " + fmt(it) for it in items[:SHOW]]
    return "\n".join(lines)


def fmt_miss(m: dict) -> str:
    got = f" — got {', '.join(m['overlapping'])}" if m["overlapping"] else ""
    kind = f" ({m['kind']})" if m["kind"] else ""
    return f"[doc {m['doc']}] {m['bucket']}/{m['variant']}{kind} {m['locale']} in {m['context_kind']}: {m['label']!r}{got}\n      {m['context']}"


def fmt_fp(f: dict) -> str:
    return f"[doc {f['doc']}] {f['type']} {f['text']!r} ({f['where']})\n      {f['context']}"


def kinds(title: str, counts: dict[str, int], top: int = 15) -> str:
    if not counts:
        return f"{title}: none"
    return f"{title}:\n" + "\n".join(f"  {n:>5}  {k}" for k, n in list(counts.items())[:top])


def one_per_kind(title: str, items: list[dict], key, fmt, top: int = 15) -> str:
    firsts: dict[str, dict] = {}
    for it in items:
        firsts.setdefault(key(it), it)
    if not firsts:
        return f"{title}: none"
    return f"{title}:\n" + "\n".join("  " + fmt(it) for it in list(firsts.values())[:top])


MISS_KIND = lambda m: f"{m['bucket']}/{m['variant']}/{m['got']}"  # noqa: E731
FP_KIND = lambda f: f"{f['type']}/{f['where']}"  # noqa: E731


# --------------------------------------------------------------------------- tests


def test_corpus_is_big_and_varied_enough():
    entity, clean = pii_corpus.corpus()
    per_type = Counter(lb.type for d in entity for lb in d.labels)
    assert sum(per_type.values()) >= 5000 and set(per_type) == set(pii_corpus.TYPES), per_type
    assert len(clean) >= 1000
    assert len({lb.locale for d in entity for lb in d.labels}) >= 6


def test_pii_detect_output_is_well_formed(run: Run):
    assert not run.malformed, f"{len(run.malformed)} malformed detection(s):\n" + "\n".join(run.malformed[:SHOW])


def test_pii_recall_and_precision_on_the_corpus(run: Run, capsys):
    with capsys.disabled():
        print(f"\n\npii detect on the Faker corpus (report: {REPORT.relative_to(REPO)})\n{run.table}\n")
    overall = run.report["overall"]
    ok = (overall["recall"] or 0) >= RECALL_TARGET and (overall["precision"] or 0) >= PRECISION_TARGET
    main_misses = [m for m in run.misses if m["bucket"] in MAIN]
    message = "\n\n".join([
        f"overall recall {overall['recall']} (target {RECALL_TARGET}), precision {overall['precision']} (target {PRECISION_TARGET})",
        run.table,
        kinds("misses by kind (bucket / variant / what was detected there)", run.report["misses_by_kind"]),
        kinds("false positives by kind (type / where)", run.report["false_positives_by_kind"]),
        listing("misses", main_misses, fmt_miss),
        listing("false positives", run.false_positives, fmt_fp),
        one_per_kind("one miss of each kind", main_misses, MISS_KIND, fmt_miss),
        one_per_kind("one false positive of each kind", run.false_positives, FP_KIND, fmt_fp),
    ])
    assert ok, message


def test_pii_clean_corpus_has_no_detections(run: Run):
    hits = [f for f in run.false_positives if f["corpus"] == "clean"]
    assert not hits, "\n\n".join([
        f"{len(hits)} detection(s) in {len(run.clean)} clean documents",
        kinds("by category / type", run.report["clean_detections_by_category"]),
        listing("detections", hits, fmt_fp),
        one_per_kind("one detection of each kind", hits, lambda f: f"{f['context_kind']}/{f['type']}", fmt_fp),
    ])


def test_pii_detect_types_filter(run: Run):
    docs = [d.text for d in run.entity[:400]]
    out = pii_detect(docs, "--types", "email,ip")
    seen = Counter(ent.get("type") for ents in out for ent in ents)
    assert set(seen) <= {"email", "ip"}, f"--types email,ip returned {dict(seen)}"
    assert seen["email"] and seen["ip"], f"--types email,ip found nothing: {dict(seen)}"
