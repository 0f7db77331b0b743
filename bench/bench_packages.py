"""Packages in the sandbox: what installs cost, and what a mounted environment costs.

1. On-demand install of pandas (with numpy) by execute_code's `requirements`:
   first (fresh data directory, empty cache: resolved and downloaded from the
   index), from uv's cache (the layer removed, the cache kept: a new set), and
   the layer reused (a second session asking for the same set). The figure is
   the answer's `packages.waited_ms`.
2. Warm execute_code round trip with the declared environment (numpy, pandas)
   mounted against without it: two servers, calls alternated, paced.
3. `import pandas` in a fresh sandboxed interpreter against bare CPython with
   the same environment on PYTHONPATH (timed inside the code).
4. The installer: uv against pip installing pandas into an empty directory,
   cold (no cache) and warm (cache filled by the cold run).

Needs uv (CEM_UV, else .test-env/sdk2/bin/uv) and pip in .test-env/sdk2. Prints JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench_execute import StdioServer, machine, pct, summary

REPO = Path(__file__).resolve().parents[1]
UV = os.environ.get("CEM_UV", str(REPO / ".test-env" / "sdk2" / "bin" / "uv"))
PIP_PYTHON = str(REPO / ".test-env" / "sdk2" / "bin" / "python")
ROUNDS = int(os.environ.get("CEM_BENCH_ROUNDS", "200"))
PAUSE = float(os.environ.get("CEM_BENCH_PAUSE", "0.15"))


class Server(StdioServer):
    def __init__(self, data_dir: Path, sandbox: dict):
        sandbox = {"installer": UV, **sandbox}
        super().__init__(data_dir, sandbox.pop("pool_size", 2), sandbox)

    def execute(self, code: str, **extra) -> dict:
        body = super().execute(code, timeout_seconds=300, **extra)
        assert body["success"], body
        return body


ON_DEMAND = {"on_demand": "allowlist", "allowed_packages": ["pandas"], "pool_size": 1}


def on_demand_installs(runs: int = 3, reuses: int = 15) -> dict:
    first, from_cache, reused = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp)
            server = Server(data, ON_DEMAND)
            try:
                body = server.execute("import pandas\nresult = pandas.__version__", requirements=["pandas"])
                assert body["packages"]["from_cache"] is False, body
                first.append(body["packages"]["waited_ms"])
                for _ in range(reuses // runs):
                    body = server.execute("import pandas", requirements=["pandas"])
                    assert body["packages"]["from_cache"] is True, body
                    reused.append(body["packages"]["waited_ms"])
            finally:
                server.close()
            # The layer gone, uv's cache kept: what another set of packages
            # sharing these wheels costs.
            shutil.rmtree(data / "packages" / "layers")
            server = Server(data, ON_DEMAND)
            try:
                body = server.execute("import pandas", requirements=["pandas"])
                assert body["packages"]["from_cache"] is False, body
                from_cache.append(body["packages"]["waited_ms"])
            finally:
                server.close()
    return {
        "first_ms": pct(first, 0.5), "first_runs": first,
        "uv_cache_ms": pct(from_cache, 0.5), "uv_cache_runs": from_cache,
        "layer_reused_ms": pct(reused, 0.5), "layer_reused_n": len(reused),
    }


def warm_round_trips(root: Path) -> dict:
    (root / "with").mkdir()
    (root / "without").mkdir()
    with_env = Server(root / "with", {"packages": ["numpy", "pandas"], "pool_size": 2})
    without = Server(root / "without", {"pool_size": 2})
    try:
        with_env.execute("import pandas")  # builds the environment, fills the pool
        without.execute("result = 0")
        time.sleep(1.0)
        times = {"with": [], "without": []}
        for _ in range(ROUNDS):
            for name, server in (("with", with_env), ("without", without)):
                t0 = time.perf_counter()
                body = server.execute("result = 1 + 1")
                times[name].append((time.perf_counter() - t0) * 1000)
                assert body["result"] == 2
                time.sleep(PAUSE / 2)
        site = next((root / "with" / "packages" / "envs").glob("*/site"))
        return {
            "with_env": summary(times["with"]), "without_env": summary(times["without"]),
            "ratio_p50": round(pct(times["with"], 0.5) / pct(times["without"], 0.5), 3),
            "site": site, "server": with_env,
        }
    except BaseException:
        with_env.close()
        raise
    finally:
        without.close()


IMPORT = "import time\nt0 = time.perf_counter()\nimport pandas\nresult = (time.perf_counter() - t0) * 1000"


def import_pandas(server: Server, site: Path, runs: int = 15) -> dict:
    inside = [server.execute(IMPORT)["result"] for _ in range(runs)]
    bare = []
    for _ in range(runs):
        out = subprocess.run(["/usr/bin/python3", "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n"
                              + IMPORT + "\nprint(result)"], capture_output=True, text=True, check=True)
        bare.append(float(out.stdout))
    return {"sandbox_ms": round(pct(inside, 0.5), 1), "bare_ms": round(pct(bare, 0.5), 1),
            "ratio_p50": round(pct(inside, 0.5) / pct(bare, 0.5), 3), "n": runs}


def installers() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        uv = [UV, "pip", "install", "--quiet", "--system-certs", "--python", "/usr/bin/python3",
              "--only-binary", ":all:", "--cache-dir", str(tmp / "uv-cache")]
        pip = [PIP_PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--only-binary", ":all:", "--cache-dir", str(tmp / "pip-cache")]
        for name, cmd in (("uv", uv), ("pip", pip)):
            for phase in ("cold", "warm"):
                target = tmp / f"{name}-{phase}"
                t0 = time.perf_counter()
                subprocess.run([*cmd, "--target", str(target), "pandas"], check=True, capture_output=True)
                out[f"{name}_{phase}_s"] = round(time.perf_counter() - t0, 2)
    out["pip_over_uv_warm"] = round(out["pip_warm_s"] / out["uv_warm_s"], 1)
    return out


def main() -> None:
    report = {"machine": machine(), "rounds": ROUNDS}
    report["on_demand_pandas"] = on_demand_installs()
    with tempfile.TemporaryDirectory() as root:
        warm = warm_round_trips(Path(root))
        server = warm.pop("server")
        try:
            report["import_pandas"] = import_pandas(server, warm.pop("site"))
        finally:
            server.close()
        report["warm_execute"] = warm
    report["installer"] = installers()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
