"""`run script.py -- args`: scripts with tools, behaving like normal programs; the examples."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from test_bridge import repo, servers  # noqa: F401  (the repo fixture)

EXAMPLES = REPO / "examples"


@pytest.fixture
def base(data_dir: Path, tmp_path: Path) -> list[str]:
    config = tmp_path / "mcp_config.json"
    config.write_text(json.dumps({"mcpServers": servers(tmp_path)}))
    return ["--config", str(config), "--data-dir", str(data_dir), "--log-level", "error"]


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(body)
    return str(path)


def test_example_single_tool_script(base: list[str], repo: Path):
    out = run_cli(*base, "run", str(EXAMPLES / "git_authors.py"), "--", str(repo), "--limit", "1", timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["5", "Ada"]


def test_example_multi_server_pipeline(base: list[str], tmp_path: Path, data_dir: Path):
    csv = tmp_path / "fsroot" / "people.csv"
    csv.parent.mkdir(exist_ok=True)
    csv.write_text("name,team\nAda,core\nGrace,compilers\nFran,compilers\n")
    out = run_cli(*base, "run", str(EXAMPLES / "team_directory.py"), "--", str(csv), "--team", "compilers", timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("compilers: Fran, Grace (3 people loaded")
    summary = json.loads((data_dir / "workspace" / "team_summary.json").read_text())
    assert summary == {"team": "compilers", "members": ["Fran", "Grace"], "people_loaded": 3}


def test_exit_codes_stdout_and_stderr_are_a_programs(base: list[str], tmp_path: Path):
    ok = run_cli(*base, "run", script(tmp_path, "import sys\nprint('out', sys.argv[1:])\nprint('err', file=sys.stderr)"),
                 "--", "-x", "y")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "out ['-x', 'y']\n", "err\n")
    exited = run_cli(*base, "run", script(tmp_path, "import sys\nprint('partial')\nsys.exit(3)"))
    assert exited.returncode == 3 and exited.stdout == "partial\n"
    crashed = run_cli(*base, "run", script(tmp_path, "x = 1\nraise ValueError('boom')"))
    assert crashed.returncode == 1
    assert 'line 2, in <module>' in crashed.stderr and "ValueError: boom" in crashed.stderr
    usage = run_cli(*base, "run", str(EXAMPLES / "team_directory.py"))
    assert usage.returncode == 2 and "usage: team_directory.py" in usage.stderr and usage.stdout == ""


def test_sandboxed_by_default_and_no_sandbox_on_request(base: list[str], tmp_path: Path):
    probe = script(tmp_path, "import os\nprint(os.path.exists('/etc/shadow'), os.getuid() == os.geteuid())")
    sandboxed = run_cli(*base, "run", probe)
    assert sandboxed.stdout.split()[0] == "False", "the host's /etc/shadow is not in the sandbox"
    trusted = run_cli(*base, "run", "--no-sandbox", probe)
    assert "WITHOUT isolation" in trusted.stderr
    assert trusted.stdout.split()[0] == str(os.path.exists("/etc/shadow"))


def test_servers_import_on_a_fresh_data_dir_with_and_without_sandbox(base: list[str], tmp_path: Path, repo: Path):
    # Nothing has searched yet, so no wrappers exist: the import asks the host to write them.
    # Without the sandbox there is no /servers: they come from the data directory.
    body = ("from servers.git import git_log\nfrom servers.everything import echo\n"
            "import servers, sys\nprint(echo(message='hi'))\nprint('Commit:' in str(git_log(repo_path=sys.argv[1], max_count=1)))\n"
            "print(servers.__path__[0] == '/servers')\n"
            "try:\n    import servers.nope\nexcept ModuleNotFoundError as e:\n    print(e)\n"
            "try:\n    from servers.Everything import echo\nexcept ModuleNotFoundError as e:\n    print(e)\n")
    for extra in (["--no-sandbox"], []):
        fresh = list(base)
        fresh[fresh.index("--data-dir") + 1] = str(tmp_path / f"data-{len(extra)}")
        out = run_cli(*fresh, "run", *extra, script(tmp_path, body), "--", str(repo), timeout=120)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split("\n")
        assert "hi" in lines[0] and lines[1] == "True", out.stdout
        assert lines[2] == ("False" if extra else "True")
        assert "servers.nope" in lines[3] and "nope" in lines[3].split(":", 1)[1], lines[3]
        # Another spelling of a configured server names the module to import instead.
        assert "'servers.Everything'" in lines[4] and "'servers.everything'" in lines[4], lines[4]


def test_first_imports_from_many_threads_at_once(base: list[str], tmp_path: Path):
    # A fresh data directory: every thread's import asks the host for wrappers at the same
    # time; each gets its module, and the servers' wrappers do not prune each other.
    body = (
        "import importlib, threading\n"
        "got = []\n"
        "def load(i):\n"
        "    name = 'servers.everything' if i % 2 else 'servers.git'\n"
        "    try:\n"
        "        got.append(importlib.import_module(name).__name__)\n"
        "    except Exception as e:\n"
        "        got.append(repr(e))\n"
        "threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(sorted(got))\n"
        "from servers.everything import echo\n"
        "from servers.git import git_status\n"
        "print(echo(message='still here'))\n"
    )
    out = run_cli(*base, "run", script(tmp_path, body), timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == str(sorted(["servers.everything"] * 4 + ["servers.git"] * 4)), out.stdout
    assert "still here" in lines[1]
