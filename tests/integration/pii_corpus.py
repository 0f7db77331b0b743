"""A labelled corpus for `code-execution-mcp pii detect`, built with Faker.

Every document is `(text, [(type, start, end)])`; start/end are Python str indices
(code points).  Labels come from construction: the builder records the offset of
each entity while it appends it to the text, nothing is searched for afterwards.

Two corpora:

* entity documents: emails, phones, SSNs, credit cards, IPs, IBANs and secrets
  from twelve Faker locales, set in sentences, chat lines, log lines, JSON records,
  CSV/markdown tables, .env and YAML files and HTTP requests;
* clean documents: code, logs, dates, ids, hashes, ISBNs, order numbers, prices,
  versions, coordinates... in which nothing may be flagged.

Everything is deterministic (fixed seeds, Faker pinned in requirements.txt).
`python tests/integration/pii_corpus.py` prints counts and samples and runs the
self-checks; `--dump FILE` writes the corpus as JSON lines.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import json
import random
import re
import string
import sys
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import faker
from faker import Faker

SEED = 20240515
FAKER_VERSION = "40.54.0"

TYPES = ("email", "phone", "ssn", "credit_card", "ip", "iban", "secret")
# "phone_bare" is a sub-bucket of "phone": a Faker number that is one bare run of
# digits (no separator, no leading +).  The detector reports it as "phone"; the
# test scores it apart and keeps it out of the overall target.
BUCKETS = TYPES + ("phone_bare",)

# Locales for names, contexts, phones, emails.  Europe, the Americas and Asia.
LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "nl_NL", "it_IT",
           "es_MX", "pt_BR", "ja_JP", "zh_CN", "en_IN")
# Countries with IBANs (Faker has a bank provider with the right BBAN format).
IBAN_LOCALES = ("de_DE", "fr_FR", "es_ES", "nl_NL", "it_IT", "en_GB", "pt_BR",
                "pl_PL", "de_AT", "de_CH", "pt_PT", "no_NO")
LANG = {"en_US": "en", "en_GB": "en", "en_IN": "en", "de_DE": "de", "de_AT": "de", "de_CH": "de",
        "fr_FR": "fr", "es_ES": "es", "es_MX": "es", "pt_BR": "pt", "pt_PT": "pt", "nl_NL": "nl",
        "it_IT": "it", "ja_JP": "ja", "zh_CN": "zh", "pl_PL": "en", "no_NO": "en"}

# How many entities of each kind.
N_EMAIL = 900
N_PHONE_PER_LOCALE = 95
N_PHONE_E164 = 240
N_PHONE_EXT = 120
N_SSN = 500
N_CARD = 800
N_IPV4, N_IPV6_FULL, N_IPV6_COMPRESSED = 500, 200, 300
N_IBAN_PER_LOCALE = 60
N_SECRET = {"openai": 100, "stripe": 80, "ghp": 80, "github_pat": 60, "glpat": 60, "slack": 60,
            "aws": 80, "jwt": 100, "kv": 150, "json": 120, "yaml": 120, "bearer": 120}
N_CLEAN = 1500

CARD_TYPES = ("visa16", "visa13", "visa19", "mastercard", "amex", "discover", "diners",
              "jcb15", "jcb16", "maestro")
CARD_TYPES_ZH = ("unionpay", "visa", "mastercard")  # the zh_CN provider has its own list
SECRET_KEYS = ("password", "passwd", "secret", "token", "api_key", "apikey", "access_token",
               "client_secret", "private_key")
ALNUM = string.ascii_letters + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"


# --------------------------------------------------------------------------- model


class Label(NamedTuple):
    type: str
    start: int
    end: int
    bucket: str  # type, or "phone_bare"
    variant: str  # how the value was made, e.g. "faker", "e164", "grouped_space", "jwt"
    locale: str
    kind: str = ""  # credit cards: Faker's card type; secrets: the token family


@dataclass
class Doc:
    text: str
    labels: list[Label]
    corpus: str  # "entity" or "clean"
    context: str  # sentence, chat, log, json, table, env, yaml, http / clean category
    locale: str

    def as_tuple(self) -> tuple[str, list[tuple[str, int, int]]]:
        return self.text, [(lb.type, lb.start, lb.end) for lb in self.labels]


@dataclass
class Item:
    """One entity value, before it is placed in a document."""

    type: str
    value: str
    variant: str
    locale: str
    key: str = ""  # secrets given as key/value pairs: the key
    kind: str = ""  # secrets: openai, stripe, ... ; cards: card type

    @property
    def bucket(self) -> str:
        if self.type == "phone" and re.fullmatch(r"\d+", self.value):
            return "phone_bare"
        return self.type


class Builder:
    """Appends text and entities, recording each entity's code-point offsets."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.n = 0
        self.labels: list[Label] = []

    def t(self, s: str) -> "Builder":
        self.parts.append(s)
        self.n += len(s)
        return self

    def e(self, item: Item) -> "Builder":
        start = self.n
        self.t(item.value)
        self.labels.append(Label(item.type, start, self.n, item.bucket, item.variant, item.locale, item.kind))
        return self

    def tpl(self, template: str, item: Item | None = None, **kw: str) -> "Builder":
        """Emit a template with one `{v}` slot for the entity; other {names} from kw."""
        if item is None:
            return self.t(fill(template, kw))
        left, right = template.split("{v}")
        return self.t(fill(left, kw)).e(item).t(fill(right, kw))

    def text(self) -> str:
        return "".join(self.parts)


def fill(s: str, kw: dict) -> str:
    for k, v in kw.items():
        s = s.replace("{" + k + "}", v)
    return s


@lru_cache(maxsize=None)
def fk(locale: str) -> Faker:
    f = Faker(locale)
    f.seed_instance(SEED ^ zlib.crc32(locale.encode()))
    return f


# --------------------------------------------------------------------------- helpers


def rand_str(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    s = iban.replace(" ", "")
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{10,30}", s):
        return False
    moved = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def ssn_ok(ssn: str) -> bool:
    m = re.fullmatch(r"(\d{3})-(\d{2})-(\d{4})", ssn)
    if not m:
        return False
    area, group, serial = (int(x) for x in m.groups())
    return area not in (0, 666) and area < 900 and group != 0 and serial != 0


def group4(s: str, sep: str) -> str:
    return sep.join(s[i:i + 4] for i in range(0, len(s), 4))


def rand_dt(rng: random.Random) -> dt.datetime:
    base = dt.datetime(2023, 1, 1, tzinfo=dt.timezone.utc)
    return base + dt.timedelta(seconds=rng.randint(0, 3 * 365 * 86400), microseconds=rng.randint(0, 999999))


def iso_ms(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def semver(rng: random.Random, prefix: bool | None = None) -> str:
    v = f"{rng.randint(0, 4)}.{rng.randint(0, 24)}.{rng.randint(0, 30)}"
    r = rng.random()
    if r < 0.12:
        v += f"-rc.{rng.randint(1, 5)}"
    elif r < 0.18:
        v += rng.choice(["-beta.2", "-alpha", "-dev", "+build.1842", "-SNAPSHOT"])
    if prefix or (prefix is None and rng.random() < 0.35):
        v = "v" + v
    return v


def uuid4(rng: random.Random) -> str:
    h = rand_str(rng, HEX, 32)
    h = h[:12] + "4" + h[13:16] + rng.choice("89ab") + h[17:]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def req_id(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.4:
        return "req-" + rand_str(rng, HEX, 8)
    if r < 0.7:
        return uuid4(rng)
    return "01" + rand_str(rng, "0123456789ABCDEFGHJKMNPQRSTVWXYZ", 24)  # ULID


SERVICES = ("api-gateway", "billing", "auth-service", "checkout", "notifier", "crm-sync", "payments",
            "user-svc", "ledger", "kyc-worker", "edge-proxy", "mailer")
HOSTS = ("db-primary.internal", "cache-01.eu-west-1.internal", "api.example.com", "queue.svc.cluster.local",
         "search-2.prod.internal", "localhost")
LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR", "DEBUG")
EMOJI = ("🙏", "👍", "😅", "🔥", "✅", "📎", "🚀", "😬", "👀", "🎉")


def duration(rng: random.Random) -> str:
    return rng.choice([f"{rng.randint(1, 999)}ms", f"{rng.randint(1, 59)}.{rng.randint(0, 9)}s",
                       f"{rng.randint(1, 5)}m{rng.randint(0, 59)}s", f"{rng.randint(100, 99999)}µs"])


def log_prefix(rng: random.Random, style: str, t: dt.datetime, service: str) -> str:
    lvl = rng.choice(LEVELS)
    if style == "app":
        return f"{iso_ms(t)} {lvl:<5} [{service}] {req_id(rng)} "
    if style == "py":
        return f"[{t.strftime('%Y-%m-%d %H:%M:%S')},{t.microsecond // 1000:03d}] {lvl} {service.replace('-', '_')}.handler - "
    if style == "syslog":
        return f"{t.strftime('%b %d %H:%M:%S')} {rng.choice(['web-1', 'worker-3', 'ip-172-31-4-20', 'node7'])} {service}[{rng.randint(100, 65000)}]: "
    if style == "k8s":
        return f"{t.strftime('%Y-%m-%dT%H:%M:%S')}.{t.microsecond:06d}Z stdout F level={lvl.lower()} svc={service} "
    raise ValueError(style)


def noise_log_message(rng: random.Random) -> str:
    return rng.choice([
        f"GET /healthz 200 {duration(rng)}",
        f"worker started pid={rng.randint(100, 65000)} version={semver(rng, True)}",
        f"cache miss for user:{rng.randint(1, 99999)} ttl={rng.randint(30, 3600)}s",
        f"retrying in {duration(rng)} (attempt {rng.randint(1, 5)}/5)",
        f"POST /v1/orders/{rng.randint(1000, 999999)}/items 201 {duration(rng)}",
        f"connected to {rng.choice(HOSTS)}:{rng.choice([5432, 6379, 9200, 5672, 3306])} pool={rng.randint(2, 64)}",
        f"deploy finished build={semver(rng)} commit={rand_str(rng, HEX, 7)} took {duration(rng)}",
        f"rate limit {rng.randint(50, 1000)}/min exceeded, queue depth {rng.randint(0, 5000)}",
    ])


# --------------------------------------------------------------------------- entities


def make_emails(rng: random.Random) -> list[Item]:
    out = []
    subs = ("mail", "eu", "corp.mail", "support", "lists", "us-east.mail", "billing", "dev.team")
    tags = ("newsletter", "github", "shop", "2024", "work", "receipts", "test", "noreply")
    for i in range(N_EMAIL):
        loc = LOCALES[i % len(LOCALES)]
        f = fk(loc)
        k = rng.randrange(9)
        if k < 4:
            out.append(Item("email", f.email(), "email", loc))
        elif k < 7:
            out.append(Item("email", f.company_email(), "company_email", loc))
        elif k == 7:
            user, dom = f.email().split("@")
            out.append(Item("email", f"{user}+{rng.choice(tags)}@{dom}", "plus_tag", loc))
        else:
            user, dom = f.company_email().split("@")
            out.append(Item("email", f"{user}@{rng.choice(subs)}.{dom}", "subdomain", loc))
    return out


# E.164: country code and national number, no spaces.
def e164(rng: random.Random, loc: str) -> str:
    d = lambda n: rand_str(rng, string.digits, n)  # noqa: E731
    nz = lambda: str(rng.randint(2, 9))  # noqa: E731
    national = {
        "en_US": lambda: nz() + d(2) + nz() + d(6),
        "en_GB": lambda: rng.choice(["7700900" + d(3), "207946" + d(4), "1134960" + d(3)]),
        "de_DE": lambda: rng.choice(["151", "160", "170", "176", "30", "89"]) + d(rng.choice([7, 8])),
        "fr_FR": lambda: str(rng.randint(1, 7)) + d(8),
        "es_ES": lambda: rng.choice("6789") + d(8),
        "nl_NL": lambda: "6" + d(8),
        "it_IT": lambda: "3" + d(9),
        "es_MX": lambda: rng.choice(["55", "33", "81"]) + d(8),
        "pt_BR": lambda: str(rng.randint(11, 99)).replace("0", "1") + "9" + d(8),
        "ja_JP": lambda: rng.choice(["90", "80", "70", "3"]) + d(8),
        "zh_CN": lambda: "1" + rng.choice("3589") + d(9),
        "en_IN": lambda: rng.choice("6789") + d(9),
    }[loc]()
    cc = {"en_US": "1", "en_GB": "44", "de_DE": "49", "fr_FR": "33", "es_ES": "34", "nl_NL": "31",
          "it_IT": "39", "es_MX": "52", "pt_BR": "55", "ja_JP": "81", "zh_CN": "86", "en_IN": "91"}[loc]
    return "+" + cc + national


def make_phones(rng: random.Random) -> list[Item]:
    out = []
    for loc in LOCALES:
        f = fk(loc)
        for _ in range(N_PHONE_PER_LOCALE):
            out.append(Item("phone", f.phone_number(), "faker", loc))
    for i in range(N_PHONE_E164):
        loc = LOCALES[i % len(LOCALES)]
        out.append(Item("phone", e164(rng, loc), "e164", loc))
    ext_locales = ("en_US", "en_GB", "es_MX", "de_DE", "en_IN")
    for i in range(N_PHONE_EXT):
        loc = ext_locales[i % len(ext_locales)]
        f = fk(loc)
        while True:
            base = f.phone_number()
            if "x" not in base and not re.fullmatch(r"\d+", base):
                break
        ext = rng.choice([f" ext. {rng.randint(1, 99)}", f" ext. {rng.randint(100, 9999)}",
                          f" x{rng.randint(100, 999)}", f" x{rng.randint(10, 99999)}", f" ext {rng.randint(10, 999)}"])
        out.append(Item("phone", base + ext, "ext", loc))
    return out


def make_ssns(rng: random.Random) -> list[Item]:
    f = fk("en_US")
    return [Item("ssn", f.ssn(), "ssn", "en_US") for _ in range(N_SSN)]


def make_cards(rng: random.Random) -> list[Item]:
    out = []
    for i in range(N_CARD):
        loc = LOCALES[i % len(LOCALES)]
        types = CARD_TYPES_ZH if loc == "zh_CN" else CARD_TYPES
        ctype = types[rng.randrange(len(types))]
        num = fk(loc).credit_card_number(card_type=ctype)
        k = rng.randrange(4)
        if k < 2:
            out.append(Item("credit_card", num, "compact", loc, kind=ctype))
        elif ctype == "amex" and rng.random() < 0.5:
            sep = rng.choice(" -")
            out.append(Item("credit_card", f"{num[:4]}{sep}{num[4:10]}{sep}{num[10:]}", "grouped_465", loc, kind=ctype))
        else:
            sep = " " if k == 2 else "-"
            out.append(Item("credit_card", group4(num, sep), "grouped_space" if sep == " " else "grouped_dash", loc,
                            kind=ctype))
    return out


def make_ips(rng: random.Random) -> list[Item]:
    out = []
    for i in range(N_IPV4):
        loc = LOCALES[i % len(LOCALES)]
        out.append(Item("ip", fk(loc).ipv4(), "ipv4", loc))
    for i in range(N_IPV6_FULL):
        loc = LOCALES[i % len(LOCALES)]
        out.append(Item("ip", ipaddress.IPv6Address(fk(loc).ipv6()).exploded, "ipv6_full", loc))
    for i in range(N_IPV6_COMPRESSED):
        loc = LOCALES[i % len(LOCALES)]
        addr = int(ipaddress.IPv6Address(fk(loc).ipv6()))
        if i % 2:  # zero a run of groups so that the compressed form has "::"
            n = rng.randint(2, 5)
            at = rng.randint(1, 8 - n)
            for g in range(at, at + n):
                addr &= ~(0xFFFF << (16 * (7 - g)))
        out.append(Item("ip", ipaddress.IPv6Address(addr).compressed, "ipv6_compressed", loc))
    return out


def make_ibans(rng: random.Random) -> list[Item]:
    out = []
    for loc in IBAN_LOCALES:
        f = fk(loc)
        for j in range(N_IBAN_PER_LOCALE):
            iban = f.iban()
            if j % 2:
                out.append(Item("iban", group4(iban, " "), "grouped", loc))
            else:
                out.append(Item("iban", iban, "compact", loc))
    return out


def jwt(rng: random.Random, loc: str) -> str:
    alg = rng.choice(["HS256", "RS256", "ES256"])
    header = {"alg": alg, "typ": "JWT"}
    if rng.random() < 0.4:
        header["kid"] = rand_str(rng, ALNUM, 16)
    iat = rng.randint(1_700_000_000, 1_760_000_000)
    payload = {"sub": str(rng.randint(1, 10**9)) if rng.random() < 0.5 else uuid4(rng),
               "name": fk(loc).name(), "iat": iat, "exp": iat + rng.choice([900, 3600, 86400])}
    if rng.random() < 0.5:
        payload["scope"] = rng.choice(["read:orders", "openid profile email", "admin"])
    sig = bytes(rng.randrange(256) for _ in range({"HS256": 32, "RS256": 256, "ES256": 64}[alg]))
    enc = lambda o: b64u(json.dumps(o, separators=(",", ":")).encode())  # noqa: E731
    return f"{enc(header)}.{enc(payload)}.{b64u(sig)}"


def secret_value(rng: random.Random, key: str) -> str:
    n = rng.randint(12, 40)
    pool = ALNUM
    if "pass" in key.lower() and rng.random() < 0.5:
        pool = ALNUM * 3 + "!#%*+-_.~^"
    while True:
        v = rng.choice(ALNUM) + rand_str(rng, pool, n - 2) + rng.choice(ALNUM)
        if re.search(r"[A-Za-z]", v) and re.search(r"\d", v):
            return v


def secret_key(rng: random.Random, style: str) -> str:
    base = rng.choice(SECRET_KEYS)
    prefix = rng.choice(["", "", "", "db_", "smtp_", "admin_", "app_", "redis_", "stripe_", "github_"])
    key = prefix + base
    if style == "upper" or (style == "any" and rng.random() < 0.4):
        return key.upper()
    if style == "camel" and rng.random() < 0.4:
        parts = key.split("_")
        return parts[0] + "".join(p.capitalize() for p in parts[1:])
    return key


def make_secrets(rng: random.Random) -> list[Item]:
    out = []
    i = 0

    def loc() -> str:
        nonlocal i
        i += 1
        return LOCALES[i % len(LOCALES)]

    for kind, n in N_SECRET.items():
        for _ in range(n):
            lc = loc()
            if kind == "openai":
                out.append(Item("secret", "sk-" + rand_str(rng, ALNUM, 48), "openai", lc, kind=kind))
            elif kind == "stripe":
                out.append(Item("secret", "sk_live_" + rand_str(rng, ALNUM, rng.randint(24, 34)), "stripe", lc, kind=kind))
            elif kind == "ghp":
                out.append(Item("secret", "ghp_" + rand_str(rng, ALNUM, 36), "github_classic", lc, kind=kind))
            elif kind == "github_pat":
                out.append(Item("secret", "github_pat_" + rand_str(rng, ALNUM, 22) + "_" + rand_str(rng, ALNUM, 59),
                                "github_fine_grained", lc, kind=kind))
            elif kind == "glpat":
                out.append(Item("secret", "glpat-" + rand_str(rng, ALNUM + "_-", 20), "gitlab", lc, kind=kind))
            elif kind == "slack":
                v = f"xoxb-{rand_str(rng, string.digits, rng.randint(10, 13))}-{rand_str(rng, string.digits, rng.randint(10, 13))}-{rand_str(rng, ALNUM, 24)}"
                out.append(Item("secret", v, "slack_bot", lc, kind=kind))
            elif kind == "aws":
                out.append(Item("secret", "AKIA" + rand_str(rng, UPPER_ALNUM, 16), "aws_access_key", lc, kind=kind))
            elif kind == "jwt":
                out.append(Item("secret", jwt(rng, lc), "jwt", lc, kind=kind))
            elif kind == "kv":
                key = secret_key(rng, "any")
                out.append(Item("secret", secret_value(rng, key), "pair_kv", lc, key=key, kind=kind))
            elif kind == "json":
                key = secret_key(rng, "camel")
                out.append(Item("secret", secret_value(rng, key), "pair_json", lc, key=key, kind=kind))
            elif kind == "yaml":
                key = secret_key(rng, "upper" if rng.random() < 0.6 else "lower")
                out.append(Item("secret", secret_value(rng, key), "pair_yaml", lc, key=key, kind=kind))
            elif kind == "bearer":
                if rng.random() < 0.5:
                    tok, var = jwt(rng, lc), "bearer_jwt"
                else:
                    n = rng.randint(24, 64)
                    tok = rng.choice(ALNUM) + rand_str(rng, ALNUM * 4 + "-._~", n - 2) + rng.choice(ALNUM)
                    var = "bearer_opaque"
                out.append(Item("secret", tok, var, lc, kind=kind))
    return out


def all_items(rng: random.Random) -> list[Item]:
    items = (make_emails(rng) + make_phones(rng) + make_ssns(rng) + make_cards(rng) + make_ips(rng)
             + make_ibans(rng) + make_secrets(rng))
    for it in items:
        check_item(it)
    return items


def check_item(it: Item) -> None:
    v = it.value
    assert v == v.strip() and v, it
    assert json.dumps(v, ensure_ascii=False)[1:-1] == v, it  # no escaping needed inside JSON strings
    if it.type == "email":
        assert re.fullmatch(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+", v), it
    elif it.type == "ssn":
        assert ssn_ok(v), it
    elif it.type == "credit_card":
        digits = re.sub(r"[ -]", "", v)
        assert digits.isdigit() and 12 <= len(digits) <= 19 and luhn_ok(digits), it
    elif it.type == "ip":
        ipaddress.ip_address(v)
    elif it.type == "iban":
        assert iban_ok(v), it
    elif it.type == "phone":
        assert re.fullmatch(r"[+(]?[\d][\d ().x-]*(ext\.? \d+)?", v), it


# --------------------------------------------------------------------------- contexts


PHRASES = {
    "en": {
        "email": ["contact {name} at {v}", "send the signed contract to {v}", "her work address is {v}",
                  "please reply to {v} before Friday", "the invoice went to {v} ({name})",
                  "{name} <{v}> asked for a refund", "cc {v} on the thread"],
        "phone": ["call {name} on {v}", "his mobile number is {v}", "reach the front desk at {v}",
                  "leave a voicemail at {v}", "{name} (tel. {v}) will pick it up", "the hotline {v} is open 24/7"],
        "ssn": ["{name}'s SSN is {v}", "the form lists social security number {v}", "SSN {v} failed the identity check",
                "use SSN: {v} for the background check"],
        "credit_card": ["{name} paid with card {v}", "the card number on file is {v}",
                        "please refund the charge on {v}", "card {v} was declined twice"],
        "ip": ["the login came from {v}", "whitelist {v} on the firewall", "{name} reports that the server at {v} is down",
               "traffic spiked from {v} around noon"],
        "iban": ["wire the deposit to IBAN {v}", "{name}'s bank account is {v}", "refunds go to IBAN {v}",
                 "the supplier changed their IBAN to {v}"],
        "token": ["the API key is {v}", "I accidentally pasted {v} into the channel, rotating it now",
                  "the deploy job uses {v}", "revoke {v} please", "{name} committed {v} to the repo"],
        "kv": ["the staging .env still contains {k}={v}", "I set {k}={v} and the login still fails",
               "found {k}={v} in the build log"],
        "bearer": ["call it with the header Authorization: Bearer {v}", "the failing request had Authorization: Bearer {v}",
                   "try curl -H \"Authorization: Bearer {v}\" https://api.example.com/v1/me"],
    },
    "de": {
        "email": ["bitte kontaktieren Sie {name} unter {v}", "die E-Mail-Adresse lautet {v}",
                  "schreiben Sie an {v}"],
        "phone": ["rufen Sie {name} unter {v} an", "Telefon: {v}", "{name} ist unter {v} erreichbar"],
        "iban": ["bitte überweisen Sie den Betrag auf IBAN {v}", "Bankverbindung: {name}, IBAN {v}"],
    },
    "fr": {
        "email": ["contactez {name} à l'adresse {v}", "écrivez-nous à {v}", "courriel : {v}"],
        "phone": ["appelez {name} au {v}", "Tél. : {v}", "vous pouvez joindre {name} au {v}"],
        "iban": ["veuillez effectuer le virement sur l'IBAN {v}", "RIB/IBAN : {v}"],
    },
    "es": {
        "email": ["contacte a {name} en {v}", "correo: {v}", "escríbanos a {v}"],
        "phone": ["llame a {name} al {v}", "Tel.: {v}", "{name} atiende en el {v}"],
        "iban": ["realice la transferencia a la cuenta IBAN {v}", "IBAN del proveedor: {v}"],
    },
    "pt": {
        "email": ["fale com {name} pelo e-mail {v}", "e-mail: {v}"],
        "phone": ["ligue para {name} no {v}", "Telefone: {v}", "WhatsApp do {name}: {v}"],
        "iban": ["transfira para o IBAN {v}", "conta (IBAN): {v}"],
    },
    "nl": {
        "email": ["neem contact op met {name} via {v}", "mail naar {v}"],
        "phone": ["bel {name} op {v}", "Tel: {v}", "{name} is bereikbaar op {v}"],
        "iban": ["maak het bedrag over naar IBAN {v}", "rekeningnummer: {v}"],
    },
    "it": {
        "email": ["contatta {name} all'indirizzo {v}", "scrivi a {v}"],
        "phone": ["chiama {name} al numero {v}", "Tel. {v}", "cell. {v}"],
        "iban": ["effettua il bonifico sull'IBAN {v}", "coordinate bancarie: IBAN {v}"],
    },
    "ja": {
        "email": ["{name}さんのメールアドレスは{v}です", "連絡先：{v}", "メール {v} までご連絡ください"],
        "phone": ["電話番号は{v}です", "{name}様の携帯：{v}", "お問い合わせ先 {v}（平日9時〜18時）"],
        "iban": ["振込先IBAN：{v}"],
    },
    "zh": {
        "email": ["请联系{name}，邮箱：{v}", "邮箱 {v}", "请发邮件至{v}"],
        "phone": ["{name}的手机号是{v}", "联系电话：{v}", "客服热线 {v}"],
        "iban": ["请汇款至IBAN：{v}"],
    },
}
# Kinds a language has no phrases for: a short localized label before the value.
LABELS = {
    "de": {"ssn": "SSN", "credit_card": "Kartennummer", "ip": "IP-Adresse", "token": "API-Schlüssel",
           "kv": "Konfiguration", "bearer": "Header"},
    "fr": {"ssn": "SSN", "credit_card": "numéro de carte", "ip": "adresse IP", "token": "clé d'API",
           "kv": "configuration", "bearer": "en-tête"},
    "es": {"ssn": "SSN", "credit_card": "número de tarjeta", "ip": "dirección IP", "token": "clave de API",
           "kv": "configuración", "bearer": "cabecera"},
    "pt": {"ssn": "SSN", "credit_card": "número do cartão", "ip": "endereço IP", "token": "chave de API",
           "kv": "configuração", "bearer": "cabeçalho"},
    "nl": {"ssn": "SSN", "credit_card": "kaartnummer", "ip": "IP-adres", "token": "API-sleutel",
           "kv": "configuratie", "bearer": "header"},
    "it": {"ssn": "SSN", "credit_card": "numero di carta", "ip": "indirizzo IP", "token": "chiave API",
           "kv": "configurazione", "bearer": "intestazione"},
    "ja": {"ssn": "SSN", "credit_card": "カード番号", "ip": "IPアドレス", "token": "APIキー", "kv": "設定",
           "bearer": "ヘッダー"},
    "zh": {"ssn": "SSN", "credit_card": "卡号", "ip": "IP地址", "token": "API密钥", "kv": "配置", "bearer": "请求头"},
}
SLOT = {"kv": "{k}={v}", "bearer": "Authorization: Bearer {v}"}


def phrases(lang: str, kind: str) -> list[str]:
    if kind in PHRASES.get(lang, {}):
        return PHRASES[lang][kind]
    if lang in LABELS:
        sep = "：" if lang in ("ja", "zh") else ": "
        label = LABELS[lang][kind]
        return [label + sep + SLOT.get(kind, "{v}")]
    return PHRASES["en"][kind]


CHAT_EXTRA = {
    "email": ["📧 {v}", "mail me: {v} 🙏", "✉️{v}"],
    "phone": ["📞{v}", "my new number 👉 {v}", "☎️ {v}"],
    "token": ["🔑 {v}", "here you go: {v} 🤫"],
}


def phrase_kind(it: Item) -> str:
    if it.type == "secret":
        if it.variant == "pair_kv":
            return "kv"
        if it.variant.startswith("bearer"):
            return "bearer"
        return "token"
    return it.type


def allowed_contexts(it: Item) -> tuple[str, ...]:
    every = ("sentence", "chat", "log", "json", "table", "env", "yaml", "http")
    if it.type == "secret":
        return {"pair_kv": ("sentence", "chat", "log", "env"), "pair_json": ("json", "http", "log"),
                "pair_yaml": ("yaml",), "bearer_jwt": ("http", "log", "chat", "sentence", "yaml"),
                "bearer_opaque": ("http", "log", "chat", "sentence", "yaml")}.get(it.variant, every)
    if it.type == "ssn":
        return ("sentence", "chat", "log", "json", "table", "http")
    return every


def fits(ctx: str, group: list[Item], it: Item) -> bool:
    if ctx not in allowed_contexts(it):
        return False
    if ctx in ("http", "yaml") and phrase_kind(it) == "bearer":
        return not any(phrase_kind(g) == "bearer" for g in group)
    return True


def cap(s: str) -> str:
    return s[0].upper() + s[1:] if s and s[0].islower() else s


def r_sentence(b: Builder, rng: random.Random, items: list[Item], loc: str, chat: bool = False) -> None:
    lang = LANG[loc]
    f = fk(loc)
    cjk = lang in ("ja", "zh")
    if chat:
        t = rand_dt(rng)
        nick = f.first_name() if not cjk else f.last_name()
        for it in items:
            kind = phrase_kind(it)
            pool = phrases(lang, kind)
            if kind in CHAT_EXTRA and rng.random() < 0.4:
                pool = CHAT_EXTRA[kind]
            b.t(f"[{t.strftime('%H:%M')}] {nick}: ")
            b.tpl(pool[rng.randrange(len(pool))], it, name=f.first_name(), k=it.key)
            if rng.random() < 0.3:
                b.t(" " + rng.choice(EMOJI))
            b.t("\n")
            t += dt.timedelta(seconds=rng.randint(5, 300))
        return
    if not cjk and rng.random() < 0.4:
        b.t(rng.choice(["Hi team, ", "FYI: ", "Update — ", "Hello, ", "Note from support: "]))
        lower_first = True
    else:
        lower_first = False
    for n, it in enumerate(items):
        kind = phrase_kind(it)
        pool = phrases(lang, kind)
        template = pool[rng.randrange(len(pool))]
        if n == 0 and not lower_first:
            template = cap(template)
        if n > 0:
            if cjk:
                b.t("，" if lang == "zh" else "、")
            else:
                sep = rng.choice([". ", ", and ", "; ", ". Also, "])
                b.t(sep)
                if sep == ". ":
                    template = cap(template)
        b.tpl(template, it, name=f.name(), k=it.key)
    b.t("。" if cjk else rng.choice([".", ".", "!", "", " — thanks."]))


LOG_MSG = {
    "email": ["user login ok user={v}", "sending welcome mail to={v}", "password reset requested for {v}",
              "invite accepted email=\"{v}\"", "bounce from <{v}>: mailbox full"],
    "phone": ["sms dispatched to=\"{v}\" provider=twilio", "otp sent phone=\"{v}\" ttl=300s", "callback number: {v}",
              "ivr transfer to {v} queue=support"],
    "ssn": ["kyc verify ssn={v} result=match", "identity check for SSN {v} took {dur}", "ssn=\"{v}\" flagged for review"],
    "credit_card": ["charge created card=\"{v}\" amount=49.99 currency=USD", "payment declined pan=\"{v}\" code=05",
                    "tokenizing card {v} for customer {cid}"],
    "ip": ["client={v} method=GET path=/api/v2/orders status=200", "blocked ip={v} rule=ratelimit",
           "new session from {v} ua=\"Mozilla/5.0\"", "X-Forwarded-For: {v}"],
    "iban": ["payout scheduled iban=\"{v}\" amount=1200.00 EUR", "SEPA mandate created for IBAN {v}",
             "validating account {v} against the bank directory"],
    "token": ["loaded credentials key={v}", "using API key {v}", "falling back to token {v} from env",
              "github push rejected for token {v}"],
    "kv": ["db connect failed: host=db-primary.internal port=5432 user=app {k}={v}", "config dump: {k}={v} timeout=30s",
           "starting worker with {k}={v} retries=3"],
    "json": ["request body: {\"user\": \"svc-{cid}\", \"{k}\": \"{v}\"}", "payload={\"{k}\": \"{v}\", \"retry\": true}"],
    "bearer": ["outgoing request headers: Authorization: Bearer {v}", "> Authorization: Bearer {v}",
               "upstream 401, sent Authorization: Bearer {v}"],
}


def r_log(b: Builder, rng: random.Random, items: list[Item], loc: str) -> None:
    style = rng.choice(["app", "py", "syslog", "k8s"])
    service = rng.choice(SERVICES)
    t = rand_dt(rng)
    lines = list(items) + [None] * rng.randint(0, 3)
    rng.shuffle(lines)
    for it in lines:
        t += dt.timedelta(milliseconds=rng.randint(1, 5000))
        if it is not None and it.type == "ip" and rng.random() < 0.35:  # nginx access log
            path = rng.choice(["/", "/login", f"/api/v1/items/{rng.randint(1, 9999)}", "/static/app.4f3a9c.js"])
            ua = rng.choice(["Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.109 Safari/537.36",
                             "curl/8.4.0", "python-requests/2.31.0", "Go-http-client/1.1",
                             "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.2 Safari/605.1.15"])
            b.e(it).t(f" - - [{t.strftime('%d/%b/%Y:%H:%M:%S +0000')}] \"{rng.choice(['GET', 'POST'])} {path} HTTP/1.1\" "
                      f"{rng.choice([200, 200, 301, 404, 500])} {rng.randint(0, 99999)} \"-\" \"{ua}\"\n")
            continue
        b.t(log_prefix(rng, style, t, service))
        if it is None:
            b.t(noise_log_message(rng) + "\n")
            continue
        kind = "json" if it.variant == "pair_json" else phrase_kind(it)
        if kind == "ip" and rng.random() < 0.35:
            if ":" in it.value:
                b.t("connection from [").e(it).t(f"]:{rng.randint(1024, 65535)}")
            else:
                b.t("connection from ").e(it).t(f":{rng.randint(1024, 65535)}")
        else:
            pool = LOG_MSG[kind]
            b.tpl(pool[rng.randrange(len(pool))], it, k=it.key, dur=duration(rng), cid=str(rng.randint(1000, 99999)))
        if rng.random() < 0.5:
            b.t(rng.choice([f" took={duration(rng)}", f" version={semver(rng)}", f" trace_id={rand_str(rng, HEX, 32)}",
                            f" attempt={rng.randint(1, 3)}"]))
        b.t("\n")


class Ent:
    """An entity inside a JSON string value, with optional text around it."""

    def __init__(self, item: Item, pre: str = "", post: str = "") -> None:
        self.item, self.pre, self.post = item, pre, post


def emit_json(b: Builder, obj, indent: int | None, level: int = 0) -> None:
    esc = lambda s: json.dumps(s, ensure_ascii=False)[1:-1]  # noqa: E731
    if isinstance(obj, Ent):
        b.t('"' + esc(obj.pre)).e(obj.item).t(esc(obj.post) + '"')
    elif isinstance(obj, (dict, list)):
        pairs = list(obj.items()) if isinstance(obj, dict) else [(None, v) for v in obj]
        open_, close = ("{", "}") if isinstance(obj, dict) else ("[", "]")
        b.t(open_)
        for n, (k, v) in enumerate(pairs):
            if n:
                b.t("," if indent is not None else ", ")
            if indent is not None:
                b.t("\n" + " " * (indent * (level + 1)))
            if k is not None:
                b.t(json.dumps(k, ensure_ascii=False) + ": ")
            emit_json(b, v, indent, level + 1)
        if indent is not None and pairs:
            b.t("\n" + " " * (indent * level))
        b.t(close)
    else:
        b.t(json.dumps(obj, ensure_ascii=False))


TOKEN_FIELDS = {"openai": ("openai_api_key", "api_key", "llm_key"), "stripe": ("stripe_key", "secret_key"),
                "ghp": ("github_token", "gh_token"), "github_pat": ("github_token", "pat"), "glpat": ("gitlab_token",),
                "slack": ("slack_bot_token", "slack_token"), "aws": ("aws_access_key_id", "access_key_id"),
                "jwt": ("id_token", "session", "jwt")}


def json_field(rng: random.Random, it: Item) -> tuple[str, object]:
    if it.type == "secret":
        if it.variant == "pair_json":
            return it.key, Ent(it)
        if it.variant.startswith("bearer"):
            return "headers", {"Authorization": Ent(it, "Bearer "), "Accept": "application/json"}
        return rng.choice(TOKEN_FIELDS[it.kind]), Ent(it)
    names = {"email": ("email", "contact_email", "billing_email", "user"), "phone": ("phone", "mobile", "tel", "phone_number"),
             "ssn": ("ssn", "social_security_number"), "credit_card": ("card_number", "pan", "cc_number"),
             "ip": ("ip", "client_ip", "remote_addr", "last_login_ip"), "iban": ("iban", "payout_iban", "account")}
    return rng.choice(names[it.type]), Ent(it)


def r_json(b: Builder, rng: random.Random, items: list[Item], loc: str, indent: int | None = None) -> None:
    f = fk(loc)
    rec: dict = {"id": rng.randint(1, 10**7), "created_at": iso_ms(rand_dt(rng)), "name": f.name()}
    nested = rng.random() < 0.4
    target: dict = {} if nested else rec
    for it in items:
        k, v = json_field(rng, it)
        while k in target or k in rec:
            k = k + "_2"
        target[k] = v
    if nested:
        rec[rng.choice(["contact", "customer", "billing", "config", "data"])] = target
    rec["status"] = rng.choice(["active", "pending", "closed"])
    if rng.random() < 0.5:
        rec["version"] = semver(rng, False)
    if rng.random() < 0.5:
        rec["amount"] = round(rng.uniform(1, 5000), 2)
    if rng.random() < 0.3:
        rec["request_id"] = uuid4(rng)
    emit_json(b, rec, indent if indent is not None else rng.choice([None, 2, 4]))


TABLE_FIELD = {"email": "email", "phone": "phone", "ssn": "ssn", "credit_card": "card", "ip": "ip", "iban": "iban",
               "secret": "api_key"}


def r_table(b: Builder, rng: random.Random, items: list[Item], loc: str) -> None:
    f = fk(loc)
    t = rand_dt(rng)
    style = rng.choice(["csv", "csv_quoted", "markdown"])
    header = ["id", "name", "field", "value", "updated", "status"]
    if style == "markdown":
        b.t("| " + " | ".join(header) + " |\n|" + "|".join("---" for _ in header) + "|\n")
    else:
        b.t(",".join(header) + "\n")
    for n, it in enumerate(items, 1):
        t += dt.timedelta(hours=rng.randint(1, 300))
        cells = [str(rng.randint(1, 99999)), f.name(), TABLE_FIELD[it.type], None, t.strftime("%Y-%m-%d"),
                 rng.choice(["verified", "pending", "bounced", "ok"])]
        if style == "markdown":
            b.t("| ")
            for i, c in enumerate(cells):
                if i:
                    b.t(" | ")
                b.e(it) if c is None else b.t(c.replace("|", "/"))
            b.t(" |\n")
        else:
            for i, c in enumerate(cells):
                if i:
                    b.t(",")
                if c is None:
                    b.t('"').e(it).t('"') if style == "csv_quoted" else b.e(it)
                elif style == "csv_quoted" or "," in c or '"' in c:
                    b.t('"' + c.replace('"', '""') + '"')
                else:
                    b.t(c)
            b.t("\n")


ENV_VAR = {"email": ("ADMIN_EMAIL", "SUPPORT_EMAIL", "MAIL_FROM"), "phone": ("SUPPORT_PHONE", "ONCALL_PHONE"),
           "credit_card": ("TEST_CARD_NUMBER",), "ip": ("BIND_ADDR", "UPSTREAM_HOST", "DNS_SERVER"),
           "iban": ("PAYOUT_IBAN", "COMPANY_IBAN"), "openai": ("OPENAI_API_KEY",), "stripe": ("STRIPE_SECRET_KEY",),
           "ghp": ("GITHUB_TOKEN", "GH_TOKEN"), "github_pat": ("GITHUB_TOKEN",), "glpat": ("GITLAB_TOKEN", "CI_JOB_TOKEN_OVERRIDE"),
           "slack": ("SLACK_BOT_TOKEN",), "aws": ("AWS_ACCESS_KEY_ID",), "jwt": ("SESSION_JWT", "SERVICE_TOKEN")}


def env_name(rng: random.Random, it: Item) -> str:
    return rng.choice(ENV_VAR[it.kind if it.type == "secret" else it.type])


def r_env(b: Builder, rng: random.Random, items: list[Item], loc: str) -> None:
    noise = [f"APP_ENV={rng.choice(['production', 'staging', 'dev'])}", f"PORT={rng.choice([3000, 8080, 8443, 5000])}",
             f"LOG_LEVEL={rng.choice(['info', 'debug', 'warn'])}", f"APP_VERSION={semver(rng, False)}",
             f"DATABASE_HOST={rng.choice(HOSTS)}", "FEATURE_FLAGS=checkout_v2,dark_mode",
             f"REQUEST_TIMEOUT_MS={rng.randint(100, 30000)}", f"WORKERS={rng.randint(1, 32)}"]
    lines: list = rng.sample(noise, rng.randint(2, 5)) + list(items)
    rng.shuffle(lines)
    b.t(rng.choice(["# .env\n", "# production settings\n", ""]))
    export = rng.random() < 0.25
    for ln in lines:
        if export:
            b.t("export ")
        if isinstance(ln, str):
            b.t(ln + "\n")
        elif ln.variant == "pair_kv":
            b.t(f"{ln.key}=").e(ln).t("\n")
        else:
            quote = '"' if (" " in ln.value or rng.random() < 0.2) else ""
            b.t(f"{env_name(rng, ln)}={quote}").e(ln).t(quote + "\n")


def r_yaml(b: Builder, rng: random.Random, items: list[Item], loc: str) -> None:
    b.t(f"service:\n  name: {rng.choice(SERVICES)}\n  version: {semver(rng, False)}\n  port: {rng.choice([80, 8080, 9090])}\n")
    sections: dict[str, list[Item]] = {}
    for it in items:
        sec = ("credentials" if it.type == "secret" and phrase_kind(it) != "bearer" else
               "http" if it.type == "secret" else "network" if it.type == "ip" else
               "billing" if it.type in ("iban", "credit_card") else "contact")
        sections.setdefault(sec, []).append(it)
    used: set[str] = set()
    for sec, its in sections.items():
        b.t(f"{sec}:\n")
        if sec == "http":
            b.t(f"  timeout: {rng.randint(1, 60)}s\n  headers:\n")
            for it in its:
                b.t("    Authorization: Bearer ").e(it).t("\n")
            continue
        for it in its:
            if it.variant == "pair_yaml":
                b.t(f"  {it.key}: ").e(it).t("\n")
            else:
                key = env_name(rng, it).lower()
                while key in used:
                    key += "_2"
                used.add(key)
                if " " in it.value or it.value.startswith(("+", "(")) or rng.random() < 0.2:
                    b.t(f"  {key}: \"").e(it).t("\"\n")
                else:
                    b.t(f"  {key}: ").e(it).t("\n")
    b.t(f"logging:\n  level: {rng.choice(['info', 'debug'])}\n  retention: {rng.randint(1, 90)}d\n")


def r_http(b: Builder, rng: random.Random, items: list[Item], loc: str) -> None:
    bearer = [it for it in items if phrase_kind(it) == "bearer"]
    body_items = [it for it in items if phrase_kind(it) != "bearer"]
    path = rng.choice(["/v1/customers", "/api/v2/payouts", "/v1/kyc/verify", "/graphql", "/api/users/me"])
    if rng.random() < 0.35:  # curl
        b.t(f"curl -sS -X POST https://api.example.com{path} \\\n")
        for it in bearer:
            b.t("  -H \"Authorization: Bearer ").e(it).t("\" \\\n")
        b.t("  -H 'Content-Type: application/json' \\\n  -d '")
        r_json_body(b, rng, body_items, loc, None)
        b.t("'\n")
        return
    b.t(f"POST {path} HTTP/1.1\nHost: api.example.com\nUser-Agent: {rng.choice(['python-requests/2.31.0', 'axios/1.6.2', 'okhttp/4.12.0'])}\n")
    for it in bearer:
        b.t("Authorization: Bearer ").e(it).t("\n")
    b.t(f"Content-Type: application/json\nX-Request-Id: {uuid4(rng)}\n\n")
    r_json_body(b, rng, body_items, loc, 2)
    b.t("\n")


def r_json_body(b: Builder, rng: random.Random, items: list[Item], loc: str, indent: int | None) -> None:
    body: dict = {}
    for it in items:
        k, v = json_field(rng, it)
        while k in body:
            k += "_2"
        body[k] = v
    body["locale"] = loc.replace("_", "-")
    body["dry_run"] = rng.random() < 0.5
    emit_json(b, body, indent)


RENDER = {"sentence": r_sentence, "chat": lambda b, rng, its, loc: r_sentence(b, rng, its, loc, chat=True),
          "log": r_log, "json": r_json, "table": r_table, "env": r_env, "yaml": r_yaml, "http": r_http}
GROUP_SIZE = {"sentence": (1, 1, 2, 2, 3), "chat": (1, 2, 3), "log": (1, 2, 3, 4), "json": (1, 2, 3, 4),
              "table": (2, 3, 4, 5, 6), "env": (1, 2, 3, 4), "yaml": (1, 2, 3), "http": (1, 2, 3)}


def entity_documents() -> list[Doc]:
    rng = random.Random(SEED)
    pool = all_items(rng)
    rng.shuffle(pool)
    docs = []
    while pool:
        first = pool.pop()
        ctx = rng.choice(allowed_contexts(first))
        group = [first]
        want = rng.choice(GROUP_SIZE[ctx]) - 1
        i, scanned = len(pool) - 1, 0
        while want > 0 and i >= 0 and scanned < 60:
            if fits(ctx, group, pool[i]):
                group.append(pool.pop(i))
                want -= 1
            i -= 1
            scanned += 1
        loc = first.locale if first.locale in LANG else "en_US"
        b = Builder()
        RENDER[ctx](b, rng, group, loc)
        docs.append(Doc(b.text(), b.labels, "entity", ctx, loc))
    return docs


# --------------------------------------------------------------------------- clean corpus


def isbn13(rng: random.Random, dashed: bool) -> str:
    body = rng.choice(["978", "979"]) + rand_str(rng, string.digits, 9)
    check = (10 - sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(body)) % 10) % 10
    s = body + str(check)
    if not dashed:
        return s
    g = rng.randint(1, 2)
    p = rng.randint(2, 5)
    rest = s[3 + g + p:12]
    return f"{s[:3]}-{s[3:3 + g]}-{s[3 + g:3 + g + p]}-{rest}-{s[12]}"


def isbn10(rng: random.Random, dashed: bool) -> str:
    body = rand_str(rng, string.digits, 9)
    check = (11 - sum(int(c) * (10 - i) for i, c in enumerate(body)) % 11) % 11
    s = body + ("X" if check == 10 else str(check))
    if not dashed:
        return s
    g = 1
    p = rng.randint(2, 5)
    return f"{s[:g]}-{s[g:g + p]}-{s[g + p:9]}-{s[9]}"


def date_formats(rng: random.Random) -> str:
    t = rand_dt(rng)
    return rng.choice([
        t.strftime("%Y-%m-%d"), t.strftime("%d/%m/%Y"), t.strftime("%m/%d/%Y"), t.strftime("%Y-%m-%dT%H:%M:%SZ"),
        iso_ms(t), t.strftime("%Y-%m-%d %H:%M:%S"), t.strftime("%d.%m.%Y"), t.strftime("%d %b %Y"),
        t.strftime("%B %d, %Y"), t.strftime("%a, %d %b %Y %H:%M:%S GMT"), t.strftime("%Y%m%d"),
        t.strftime("%Y-%m-%dT%H:%M:%S+02:00"), str(int(t.timestamp())), str(int(t.timestamp() * 1000)),
        t.strftime("%H:%M:%S"), f"{t.year}年{t.month}月{t.day}日", t.strftime("%d/%b/%Y:%H:%M:%S +0000"),
        t.strftime("%Y-W%V"), t.strftime("%Y.%m.%d"),
    ])


def price(rng: random.Random) -> str:
    a = rng.uniform(0.5, 25000)
    return rng.choice([f"${a:,.2f}", f"€{a:.2f}".replace(".", ","), f"{a:,.2f} €".replace(",", " ").replace(".", ","),
                       f"£{a:.2f}", f"¥{int(a) * 10:,}", f"R$ {a:,.2f}".replace(",", "X").replace(".", ",").replace("X", "."),
                       f"USD {a:.2f}", f"{a:.2f} CHF"])


def pct(rng: random.Random) -> str:
    return rng.choice([f"{rng.uniform(0, 100):.1f}%", f"{rng.randint(1, 100)}%", f"{rng.uniform(0, 1):.2%}", f"{rng.randint(1, 99)} %"])


def size(rng: random.Random) -> str:
    return rng.choice([f"{rng.uniform(0.1, 999):.1f} {rng.choice(['KB', 'MB', 'GB', 'MiB', 'GiB', 'TB'])}",
                       f"{rng.randint(1, 4096)}MiB", f"{rng.randint(1, 9)},{rng.randint(100, 999)} KB", f"{rng.randint(1, 10**9)} bytes"])


def coords(rng: random.Random) -> str:
    return rng.choice([f"{rng.uniform(-90, 90):.4f}, {rng.uniform(-180, 180):.4f}",
                       f"{rng.uniform(-90, 90):.6f},{rng.uniform(-180, 180):.6f}",
                       f"{rng.uniform(0, 90):.4f}° {rng.choice('NS')}, {rng.uniform(0, 180):.4f}° {rng.choice('EW')}",
                       f"lat={rng.uniform(-90, 90):.5f} lon={rng.uniform(-180, 180):.5f}"])


def status(rng: random.Random) -> str:
    return str(rng.choice([200, 201, 204, 301, 302, 400, 401, 403, 404, 409, 429, 500, 502, 503, 504]))


def port(rng: random.Random) -> str:
    return str(rng.choice([22, 80, 443, 3000, 5432, 6379, 8080, 8443, 9092, 27017, rng.randint(1024, 65535)]))


def semver_range(rng: random.Random) -> str:
    return rng.choice([rng.choice(["^", "~", ">=", "<", "~> ", "=="]) + semver(rng, False),
                       f">={semver(rng, False)}, <{rng.randint(1, 9)}.0.0", f"{rng.randint(1, 5)}.x",
                       f"[{rng.randint(0, 3)}.{rng.randint(0, 9)}, {rng.randint(4, 9)}.0)"])


def order_no(rng: random.Random) -> str:
    return rng.choice([f"ORD-{rng.randint(2019, 2025)}-{rng.randint(0, 999999):06d}", f"INV-{rng.randint(0, 99999):05d}",
                       f"#{rng.randint(10000, 999999)}", f"PO-{rng.randint(2019, 2025)}/{rng.randint(1, 9999):04d}"])


def misc_doc(rng: random.Random) -> str:
    return rng.choice([
        lambda: f"Total: {price(rng)} incl. {rng.randint(5, 25)}% VAT, delivered in {rng.randint(1, 14)} days.",
        lambda: f"CPU {pct(rng)} | mem {size(rng)} | disk {pct(rng)} of {size(rng)} | uptime {rng.randint(1, 400)}d {rng.randint(0, 23)}h",
        lambda: f"The upstream returned HTTP {status(rng)}; retrying after {rng.randint(1, 120)}s on port {port(rng)}.",
        lambda: f"Store location: {coords(rng)}; order {order_no(rng)}, amount {price(rng)}",
        lambda: f"requires {semver_range(rng)}; tested with {semver(rng, False)} and {semver(rng, True)}",
        lambda: f"Downloading {size(rng)} ({pct(rng)} done, ETA {rng.randint(0, 2):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d})",
        lambda: f"listening on localhost:{port(rng)} (pid {rng.randint(100, 99999)}), max body {size(rng)}, timeout {duration(rng)}",
        lambda: f"Refund of {price(rng)} for order {order_no(rng)} approved ({pct(rng)} restocking fee).",
        lambda: f"screen {rng.randint(640, 3840)}x{rng.randint(480, 2160)} @ {rng.choice([60, 120, 144])}Hz, build took {rng.randint(1, 59)}m {rng.randint(0, 59)}s",
        lambda: f"GPS {coords(rng)} accuracy {rng.randint(1, 50)} m, altitude {rng.randint(-20, 4000)} m",
    ])()


CODE_PY = [
    'def retry(fn, attempts={a}, backoff={f}):\n    for i in range(attempts):\n        try:\n            return fn()\n        except TimeoutError:\n            time.sleep(backoff ** i)\n    raise RuntimeError("gave up after %d attempts" % attempts)\n',
    '__version__ = "{ver}"\nMAX_UPLOAD = {n} * 1024 * 1024\nDEFAULT_PORT = {port}\n',
    'app = FastAPI(title="{svc}", version="{ver}")\n\n@app.get("/orders/{{order_id}}")\nasync def get_order(order_id: int):\n    return await db.fetch_one("SELECT * FROM orders WHERE id = $1", order_id)\n',
    'df = pd.read_csv("sales_{year}.csv", parse_dates=["date"])\nprint(df.groupby("region")["total"].sum().round(2))  # {n} rows\n',
    'CACHE_TTL = timedelta(seconds={n})\nCOLORS = ["#{hex6}", "#{hex6b}"]\nassert hashlib.sha256(data).hexdigest() == "{sha256}"\n',
    'for i, row in enumerate(rows[:{n}]):\n    if row["status"] == {status}:\n        log.warning("row %s failed after %.2fs", i, elapsed)\n',
    'import os\n\nDB_HOST = os.getenv("DB_HOST", "localhost")\nDB_PORT = int(os.getenv("DB_PORT", "{port}"))\n',
]
CODE_RS = [
    'const TIMEOUT: Duration = Duration::from_secs({n});\n\nfn main() -> anyhow::Result<()> {{\n    let port: u16 = std::env::var("PORT").unwrap_or_else(|_| "{port}".into()).parse()?;\n    println!("listening on {{}}", port);\n    Ok(())\n}}\n',
    '#[derive(Debug, Serialize)]\nstruct Order {{\n    id: u64,\n    total_cents: i64,\n    created: DateTime<Utc>,\n}}\n\nlet o = Order {{ id: {n}, total_cents: {cents}, created: Utc::now() }};\n',
    'let digest = Sha256::digest(b"{word}");\nassert_eq!(hex::encode(digest).len(), 64);\nlet v = semver::Version::parse("{verplain}")?;\n',
    'match status {{\n    {status} => Err(Error::RateLimited {{ retry_after: {n} }}),\n    code if code >= 500 => Err(Error::Upstream(code)),\n    _ => Ok(()),\n}}\n',
    '[dependencies]\ntokio = {{ version = "{tokio}", features = ["full"] }}\nserde = "{serde}"\n',
]
CODE_JS = [
    'const res = await fetch(`/api/orders/${{id}}?page={a}`, {{ headers: {{ "Content-Type": "application/json" }} }});\nif (res.status === {status}) throw new Error("failed");\n',
    'setTimeout(() => controller.abort(), {n});\nexport const VERSION = "{ver}";\n',
    'const total = items.reduce((sum, it) => sum + it.price * it.qty, 0).toFixed(2);\nconsole.log(`total: ${{total}} ({n} items)`);\n',
    '"dependencies": {{\n  "react": "^{r}",\n  "express": "~{e}",\n  "lodash": "{l}"\n}}\n',
    'const id = crypto.randomUUID(); // e.g. {uuid}\nconst hash = "{md5}";\n',
]
CODE_SECRET_REFS = [
    'api_key = os.environ["OPENAI_API_KEY"]\nclient = OpenAI(api_key=api_key)\n',
    'password = getpass.getpass("Password: ")\n',
    'let token = std::env::var("GITHUB_TOKEN").expect("GITHUB_TOKEN not set");\n',
    'const password = process.env.DB_PASSWORD;\nconst secret = config.get("session.secret");\n',
    'headers = {{"Authorization": f"Bearer {{token}}"}}\n',
    'DB_PASSWORD=${{DB_PASSWORD}}\nAPI_TOKEN=\n',
    'password: "********"\nclient_secret: "[REDACTED]"\n',
]


def code_fill(rng: random.Random, tpl: str) -> str:
    return tpl.format(
        a=rng.randint(2, 9), f=rng.choice([1.5, 2, 0.5]), ver=semver(rng, False), verplain=semver(rng, False),
        n=rng.randint(3, 99999), port=rng.choice([3000, 5432, 8080, 8443]), svc=rng.choice(SERVICES),
        year=rng.randint(2019, 2025), hex6=rand_str(rng, HEX, 6), hex6b=rand_str(rng, HEX, 6),
        sha256=rand_str(rng, HEX, 64), status=rng.choice([404, 429, 500, 503]), cents=rng.randint(1, 10**6),
        word=rng.choice(["hello", "abc", "payload"]), tokio=f"1.{rng.randint(20, 40)}", serde=f"1.0.{rng.randint(100, 200)}",
        r=f"18.{rng.randint(0, 3)}.{rng.randint(0, 9)}", e=f"4.{rng.randint(17, 19)}.{rng.randint(0, 9)}",
        l=f"4.17.{rng.randint(10, 21)}", uuid=uuid4(rng), md5=rand_str(rng, HEX, 32))


def clean_doc(rng: random.Random, cat: str) -> str:
    if cat == "code_python":
        return code_fill(rng, rng.choice(CODE_PY))
    if cat == "code_rust":
        return code_fill(rng, rng.choice(CODE_RS))
    if cat == "code_js":
        return code_fill(rng, rng.choice(CODE_JS))
    if cat == "code_secret_refs":
        return code_fill(rng, rng.choice(CODE_SECRET_REFS))
    if cat == "log_versions":
        service, t = rng.choice(SERVICES), rand_dt(rng)
        out = []
        for _ in range(rng.randint(1, 4)):
            t += dt.timedelta(seconds=rng.randint(1, 90))
            msg = rng.choice([
                f"deploying {service} {semver(rng, True)} -> {semver(rng, True)} ({rng.randint(1, 9)} replicas)",
                f"upgrading numpy {semver(rng, False)} → {semver(rng, False)}",
                f"runtime: Node.js v{rng.randint(16, 22)}.{rng.randint(0, 12)}.{rng.randint(0, 9)}, npm {semver(rng, False)}",
                f"kernel 6.{rng.randint(1, 8)}.0-{rng.randint(10, 40)}-generic, go1.{rng.randint(19, 23)}.{rng.randint(0, 9)} linux/amd64",
                f"Server: nginx/1.{rng.randint(18, 27)}.{rng.randint(0, 5)}, build 10.0.{rng.randint(19000, 22999)}.{rng.randint(1000, 4000)}",
                f"User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/{rng.randint(100, 125)}.0.{rng.randint(5000, 6500)}.{rng.randint(10, 200)} Safari/537.36",
                f"schema migration {t.strftime('%Y%m%d%H%M%S')}_add_orders_index applied in {duration(rng)}",
                noise_log_message(rng),
            ])
            out.append(log_prefix(rng, rng.choice(["app", "py", "syslog", "k8s"]), t, service) + msg)
        return "\n".join(out) + "\n"
    if cat == "dates":
        return rng.choice([
            f"The meeting moved from {date_formats(rng)} to {date_formats(rng)}.",
            f"last_seen={date_formats(rng)} created={date_formats(rng)}",
            f"Backup completed at {date_formats(rng)} (took {duration(rng)}).",
            f"Valid from {date_formats(rng)} until {date_formats(rng)}",
            f"ts={date_formats(rng)} epoch={int(rand_dt(rng).timestamp())} epoch_ms={int(rand_dt(rng).timestamp() * 1000)}",
        ])
    if cat == "ids":
        sha = rand_str(rng, HEX, 40)
        return rng.choice([
            f"request {uuid4(rng)} finished; parent span {rand_str(rng, HEX, 16)}",
            f"commit {sha}\nMerge: {sha[:7]} {rand_str(rng, HEX, 7)}\n",
            f"{rand_str(rng, HEX, 32)}  dist/app-{semver(rng, False)}.tar.gz",
            f"sha256sum: {rand_str(rng, HEX, 64)}  release.zip",
            f"image: registry/app@sha256:{rand_str(rng, HEX, 64)}",
            f"Fixed in {sha[:12]} (see #{rng.randint(100, 9999)}), cherry-picked as {rand_str(rng, HEX, 7)}.",
            f"etag: \"{rand_str(rng, HEX, 32)}\"  x-request-id: {uuid4(rng)}",
        ])
    if cat == "isbn":
        return rng.choice([
            f"ISBN {isbn13(rng, True)}", f"ISBN-13: {isbn13(rng, False)}", f"ISBN-10: {isbn10(rng, True)}",
            f"isbn={isbn10(rng, False)}", f"Cited: Smith, J. (2019). Data Pipelines. ISBN {isbn13(rng, rng.random() < .5)}, p. {rng.randint(1, 500)}.",
        ])
    if cat == "orders":
        lines = ["order_id,date,sku,qty,unit_price,total"]
        for _ in range(rng.randint(2, 6)):
            q, p = rng.randint(1, 20), rng.uniform(1, 999)
            lines.append(f"ORD-{rng.randint(2019, 2025)}-{rng.randint(0, 999999):06d},{date_formats(rng) if rng.random() < .3 else rand_dt(rng).strftime('%Y-%m-%d')},"
                         f"SKU-{rand_str(rng, UPPER_ALNUM, 6)},{q},{p:.2f},{q * p:.2f}")
        return "\n".join(lines) + "\n"
    if cat == "misc":
        return "\n".join(misc_doc(rng) for _ in range(rng.randint(1, 3)))
    if cat == "table":
        rows = ["| benchmark | p50 | p99 | throughput | change |", "|---|---|---|---|---|"]
        for _ in range(rng.randint(2, 6)):
            rows.append(f"| {rng.choice(['execute', 'parse', 'startup', 'search'])}_{rng.randint(1, 99)} | {duration(rng)} | {duration(rng)} | "
                        f"{rng.randint(100, 99999):,} req/s | {rng.uniform(-30, 30):+.1f}% |")
        return "\n".join(rows) + "\n"
    if cat == "json":
        t = rand_dt(rng)
        rec = {"order": f"ORD-{t.year}-{rng.randint(0, 999999):06d}", "created_at": iso_ms(t), "total": round(rng.uniform(1, 999), 2),
               "currency": rng.choice(["EUR", "USD", "JPY"]), "items": rng.randint(1, 9), "sha": rand_str(rng, HEX, 40),
               "client_version": semver(rng, False), "latency_ms": rng.randint(1, 9999), "ts": int(t.timestamp())}
        return json.dumps(rec, ensure_ascii=False, indent=rng.choice([None, 2]))
    raise ValueError(cat)


CLEAN_CATEGORIES = {"code_python": 150, "code_rust": 120, "code_js": 120, "code_secret_refs": 60, "log_versions": 200,
                    "dates": 200, "ids": 180, "isbn": 110, "orders": 100, "misc": 160, "table": 50, "json": 50}


def clean_documents() -> list[Doc]:
    rng = random.Random(SEED + 1)
    docs = []
    for cat, n in CLEAN_CATEGORIES.items():
        for _ in range(n):
            docs.append(Doc(clean_doc(rng, cat), [], "clean", cat, ""))
    assert sum(CLEAN_CATEGORIES.values()) == N_CLEAN
    rng.shuffle(docs)
    return docs


# --------------------------------------------------------------------------- honesty checks

# Things that would be an unlabelled entity if they turned up outside a label.
_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_IPV4_RE = re.compile(r"(?<![\d.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?!\.?\d)")
_IPV6_RE = re.compile(r"(?<![\w:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")
_DIGITS_RE = re.compile(r"(?<![\w-])\d(?:[ -]?\d){11,18}(?![\w-])")
_SSN_RE = re.compile(r"(?<![\d-])\d{3}-\d{2}-\d{4}(?![\d-])")
_IBAN_RE = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){10,30}\b")
_PREFIX_RE = re.compile(r"(?<![A-Za-z0-9])(sk-|sk_live_|ghp_|github_pat_|glpat-|xox[bp]-|AKIA[0-9A-Z]{16}|eyJ)")
_PAIR_RE = re.compile(r"(?i)(password|passwd|secret|token|api_?key|access_token|client_secret|private_key)[\"']?\s*[:=]\s*[\"']?"
                      r"(?:Bearer )?([A-Za-z0-9!#%*+_.~^-]{12,})")
_BEARER_RE = re.compile(r"Bearer [A-Za-z0-9._~+/-]{8,}")
_PHONE_RE = re.compile(r"\+\d{1,3}[ (-]*\d[\d ().-]{6,}\d|(?<!\d)\(?\d{3}\)?[-. ]\d{3}[-.]\d{4}(?!\d)")


def unlabelled_entities(text: str) -> list[tuple[str, str]]:
    """Entity-looking strings in `text` (labels must already be masked out)."""
    found = []
    for m in _EMAIL_RE.finditer(text):
        found.append(("email", m.group()))
    for m in _IPV4_RE.finditer(text):
        if all(int(g) <= 255 for g in m.groups()):
            found.append(("ipv4", m.group()))
    for m in _IPV6_RE.finditer(text):
        if m.group().count(":") >= 2:
            try:
                ipaddress.IPv6Address(m.group())
                found.append(("ipv6", m.group()))
            except ValueError:
                pass
    for m in _DIGITS_RE.finditer(text):
        d = re.sub(r"[ -]", "", m.group())
        if d[0] in "23456" and luhn_ok(d):
            found.append(("card", m.group()))
    for m in _SSN_RE.finditer(text):
        found.append(("ssn", m.group()))
    for m in _IBAN_RE.finditer(text):
        if iban_ok(m.group()):
            found.append(("iban", m.group()))
    for m in _PREFIX_RE.finditer(text):
        found.append(("secret_prefix", text[m.start():m.start() + 20]))
    for m in _PAIR_RE.finditer(text):
        v = m.group(2)
        if re.search(r"\d", v) and re.search(r"[A-Za-z]", v):
            found.append(("secret_pair", m.group()))
    for m in _BEARER_RE.finditer(text):
        found.append(("bearer", m.group()))
    for m in _PHONE_RE.finditer(text):
        found.append(("phone", m.group()))
    return found


def masked(doc: Doc) -> str:
    chars = list(doc.text)
    for lb in doc.labels:
        for i in range(lb.start, lb.end):
            chars[i] = "\u2588"
    return "".join(chars)


def self_check(entity: list[Doc], clean: list[Doc]) -> list[str]:
    """Problems with the corpus itself; empty when it is sound."""
    problems = []
    for n, d in enumerate(entity):
        spans = sorted((lb.start, lb.end) for lb in d.labels)
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            if s2 < e1:
                problems.append(f"entity doc {n}: overlapping labels")
        for lb in d.labels:
            v = d.text[lb.start:lb.end]
            if not v or v != v.strip():
                problems.append(f"entity doc {n}: bad label {lb} {v!r}")
        if d.context in ("json",):
            json.loads(d.text)
        for kind, s in unlabelled_entities(masked(d)):
            problems.append(f"entity doc {n} ({d.context}): unlabelled {kind} {s!r}")
    for n, d in enumerate(clean):
        if d.context == "json":
            json.loads(d.text)
        for kind, s in unlabelled_entities(d.text):
            if d.context == "code_secret_refs" and kind in ("secret_pair", "bearer"):
                continue  # env-var look-ups and placeholders, deliberately
            problems.append(f"clean doc {n} ({d.context}): {kind} {s!r}")
    return problems


@lru_cache(maxsize=1)
def corpus() -> tuple[list[Doc], list[Doc]]:
    return entity_documents(), clean_documents()


def labelled_documents() -> list[tuple[str, list[tuple[str, int, int]]]]:
    """All documents, entity ones then clean ones, as (text, [(type, start, end)])."""
    entity, clean = corpus()
    return [d.as_tuple() for d in entity + clean]


# --------------------------------------------------------------------------- CLI


def stats(entity: list[Doc], clean: list[Doc]) -> str:
    by_bucket = Counter(lb.bucket for d in entity for lb in d.labels)
    by_type_loc = Counter((lb.bucket, lb.locale) for d in entity for lb in d.labels)
    by_variant = Counter((lb.bucket, lb.variant) for d in entity for lb in d.labels)
    by_card = Counter(lb.kind for d in entity for lb in d.labels if lb.type == "credit_card")
    by_ctx = Counter(d.context for d in entity)
    lines = [f"Faker {faker.VERSION}; entity documents {len(entity)}, entities {sum(by_bucket.values())}, "
             f"clean documents {len(clean)}"]
    lines.append("entities per bucket: " + ", ".join(f"{b}={by_bucket[b]}" for b in BUCKETS))
    locs = sorted({lb.locale for d in entity for lb in d.labels})
    lines.append("per bucket and locale:")
    lines.append("  " + "bucket".ljust(12) + "".join(loc.ljust(7) for loc in locs))
    for bk in BUCKETS:
        lines.append("  " + bk.ljust(12) + "".join(str(by_type_loc[(bk, loc)] or "").ljust(7) for loc in locs))
    lines.append("variants: " + ", ".join(f"{b}/{v}={n}" for (b, v), n in sorted(by_variant.items())))
    lines.append("card types: " + ", ".join(f"{k}={n}" for k, n in sorted(by_card.items())))
    lines.append("contexts: " + ", ".join(f"{c}={n}" for c, n in sorted(by_ctx.items())))
    lines.append("clean categories: " + ", ".join(f"{c}={n}" for c, n in sorted(Counter(d.context for d in clean).items())))
    return "\n".join(lines)


def show(d: Doc) -> str:
    out = [f"--- {d.corpus}/{d.context} locale={d.locale}", d.text]
    for lb in d.labels:
        out.append(f"    {lb.bucket:<11} {lb.variant:<20} {lb.kind:<10} {lb.locale:<6} [{lb.start}:{lb.end}] {d.text[lb.start:lb.end]!r}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2, help="documents to print per bucket and per context")
    ap.add_argument("--dump", help="write all documents as JSON lines to this file")
    args = ap.parse_args(argv)
    if faker.VERSION != FAKER_VERSION:
        print(f"warning: Faker {faker.VERSION}, the corpus is pinned to {FAKER_VERSION}", file=sys.stderr)
    entity, clean = corpus()
    print(stats(entity, clean))
    rng = random.Random(1)
    for bk in BUCKETS:
        pick = [d for d in entity if any(lb.bucket == bk for lb in d.labels)]
        for d in rng.sample(pick, min(args.samples, len(pick))):
            print(show(d))
    for ctx in RENDER:
        pick = [d for d in entity if d.context == ctx]
        for d in rng.sample(pick, min(args.samples, len(pick))):
            print(show(d))
    for d in rng.sample(clean, min(args.samples * 4, len(clean))):
        print(show(d))
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as fh:
            for d in entity + clean:
                fh.write(json.dumps({"text": d.text, "labels": [lb._asdict() for lb in d.labels], "corpus": d.corpus,
                                     "context": d.context, "locale": d.locale}, ensure_ascii=False) + "\n")
    problems = self_check(entity, clean)
    for p in problems[:50]:
        print("PROBLEM", p)
    print(f"self-check: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
