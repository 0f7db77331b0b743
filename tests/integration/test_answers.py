"""What an answer carries besides text: charts and images as MCP image blocks, tables as
Markdown for the model with the rows in structuredContent, and a lean text envelope.

Real matplotlib, pandas and Pillow, installed by the host into the sandbox's declared
environment (sandbox.packages, built once for the module); a real server-everything for an
upstream tool's image.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest
from mcp import Client

from conftest import UV, package_data_dir, stdio_params
from test_upstream import EVERYTHING

pytestmark = pytest.mark.anyio

PACKAGES = ["matplotlib", "pandas", "pillow"]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def pkg_data(tmp_path_factory) -> Path:
    return package_data_dir(tmp_path_factory, "answers")


def client(data: Path, tmp: Path, answers: dict | None = None, servers: dict | None = None) -> Client:
    config = tmp / "config.json"
    config.write_text(json.dumps({
        "mcpServers": servers or {},
        "sandbox": {"installer": UV, "pool_size": 1, "packages": PACKAGES},
        **({"answers": answers} if answers else {}),
    }))
    params = stdio_params(data)
    params.args = ["--config", str(config), *params.args]
    return Client(params)


async def call(c: Client, code: str):
    return await c.call_tool("execute_code", {"code": code, "timeout_seconds": 300})


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), data[:8]
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def images(answer) -> list[bytes]:
    return [base64.b64decode(b.data) for b in answer.content if b.type == "image"]


BAR_CHART = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
ax.bar(["north", "south", "east"], [17, 7, 1])
ax.set_title("sales by region")
path = show(fig)
result = {"path": path, "open": plt.get_fignums()}
"""


async def test_a_bar_chart_comes_back_as_a_png_image_block(pkg_data: Path, tmp_path: Path):
    async with client(pkg_data, tmp_path) as c:
        answer = await call(c, BAR_CHART)
        body = answer.structured_content
        assert not answer.is_error, body
        [png] = images(answer)
        assert png_size(png) == (600, 400)
        [block] = [b for b in answer.content if b.type == "image"]
        assert block.mime_type == "image/png"
        # Shown once, then closed: not shown again at the end.
        assert body["result"]["open"] == [], body
        path = body["result"]["path"]
        assert path.startswith("shown/") and path.endswith(".png")
        # Saved in the workspace as sent, and linked as a resource.
        assert (pkg_data / "workspace" / path).read_bytes() == png
        assert [b.uri for b in answer.content if b.type == "resource_link"] == [f"workspace://{path}"]
        assert body["images"] == [{"path": path, "mime": "image/png", "width": 600, "height": 400, "bytes": len(png)}]


async def test_a_figure_left_open_is_shown_and_a_closed_one_is_not(pkg_data: Path, tmp_path: Path):
    async with client(pkg_data, tmp_path) as c:
        answer = await call(c, """
import matplotlib.pyplot as plt
plt.figure(figsize=(3, 2), dpi=100); plt.plot([1, 3, 2])
kept_away = plt.figure(figsize=(5, 5)); plt.plot([0, 1])
plt.close(kept_away)
""")
        assert not answer.is_error, answer.structured_content
        assert [png_size(p) for p in images(answer)] == [(300, 200)]
        # An execution that fails shows what it showed, not its half-drawn figures.
        failed = await call(c, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nraise RuntimeError('no data')")
        assert failed.is_error and images(failed) == []


async def test_a_dataframe_result_reads_as_a_markdown_table_with_every_row_structured(pkg_data: Path, tmp_path: Path):
    async with client(pkg_data, tmp_path) as c:
        answer = await call(c, """
import pandas as pd
df = pd.DataFrame({"city": [f"c{i}" for i in range(45)], "sales": range(45), "share": [i / 100 for i in range(45)]})
result = df
""")
        body = answer.structured_content
        assert not answer.is_error, body
        text = answer.content[0].text
        lines = text.splitlines()
        assert lines[0] == "|city|sales|share|" and lines[1] == "|-|-|-|", text
        assert lines[2] == "|c0|0|0.0|", text
        assert len([line for line in lines if line[:3] == "|c" + line[2:3] and line[2:3].isdigit()]) == 30
        assert lines[-1] == "… 15 more rows", text
        assert body["table"] == {"columns": ["city", "sales", "share"], "rows": 45}
        assert len(body["result"]) == 45 and body["result"][44] == {"city": "c44", "sales": 44, "share": 0.44}
        # A picture as the result is shown once, not returned as its repr.
        pictured = await call(c, "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(2, 2))\nplt.plot([1])\nresult = fig")
        assert [png_size(p) for p in images(pictured)] == [(200, 200)]
        assert pictured.structured_content["result"] is None and "note" not in pictured.structured_content
        # A grouped Series keeps its index as a column.
        grouped = await call(c, """
import pandas as pd
df = pd.DataFrame({"region": ["n", "s", "n"], "amount": [10, 5, 7]})
result = df.groupby("region")["amount"].sum()
""")
        assert grouped.content[0].text == "|region|amount|\n|-|-|\n|n|17|\n|s|5|"
        assert grouped.structured_content["result"] == [{"region": "n", "amount": 17}, {"region": "s", "amount": 5}]


async def test_table_and_flat_dicts_read_as_tables(pkg_data: Path, tmp_path: Path):
    async with client(pkg_data, tmp_path) as c:
        named = await call(c, "result = table([(1, 'a|b'), (2, None)], columns=['n', 'label'])")
        assert named.content[0].text == "|n|label|\n|-|-|\n|1|a\\|b|\n|2||"
        flat = await call(c, "result = [{'sha': 'abc', 'files': 2}, {'sha': 'def', 'files': 1}]")
        assert flat.content[0].text == "|sha|files|\n|-|-|\n|abc|2|\n|def|1|"
        nested = await call(c, "result = [{'sha': 'abc', 'files': ['a.py']}]")
        assert json.loads(nested.content[0].text) == [{"sha": "abc", "files": ["a.py"]}]
        bad = await call(c, "result = table([(1, 2, 3)], columns=['a', 'b'])")
        assert bad.is_error and "row 0 has 3 values for 2 columns" in bad.content[0].text


async def test_pil_images_are_shown_and_large_ones_downscaled(pkg_data: Path, tmp_path: Path):
    async with client(pkg_data, tmp_path) as c:
        answer = await call(c, """
from PIL import Image
show(Image.new("RGB", (320, 200), "teal"))
show(Image.new("RGBA", (4000, 1000), (200, 10, 10, 255)), name="wide.png")
""")
        body = answer.structured_content
        assert not answer.is_error, body
        small, wide = images(answer)
        assert png_size(small) == (320, 200)
        assert png_size(wide) == (1568, 392)
        assert body["images"][1]["changed"] == "downscaled from 4000×1000 to 1568×392"
        assert "image shown/wide.png was downscaled from 4000×1000 to 1568×392" in answer.content[0].text
        # The workspace keeps the picture as the code made it.
        assert png_size((pkg_data / "workspace" / "shown" / "wide.png").read_bytes()) == (4000, 1000)


async def test_too_many_or_too_large_images_are_refused_in_the_code(pkg_data: Path, tmp_path: Path):
    async with client(pkg_data, tmp_path, answers={"max_images": 2, "max_image_bytes": 65536}) as c:
        many = await call(c, """
from PIL import Image
for i in range(3):
    show(Image.new("RGB", (10, 10)))
""")
        assert many.is_error
        text = many.content[0].text
        assert "already shows 2 images, the most answers.max_images allows" in text, text
        assert len(images(many)) == 2, "what was shown before the refusal is still sent"
        large = await call(c, "import os\nshow(b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(100_000))")
        assert large.is_error and "over answers.max_image_bytes (65,536)" in large.content[0].text
        caught = await call(c, """
try:
    show(b"GIF89a not a png")
except ValueError as e:
    result = str(e)
""")
        assert "is not a PNG, JPEG or SVG image" in caught.structured_content["result"]


async def test_an_upstream_tools_image_passes_through_show(pkg_data: Path, tmp_path: Path):
    servers = {"everything": {"command": "node", "args": [EVERYTHING, "stdio"]}}
    async with client(pkg_data, tmp_path, servers=servers) as c:
        answer = await call(c, """
blocks = call_tool("everything.get-tiny-image", {})
shown = show(blocks)
result = {"shown": shown, "kinds": [b.get("type") for b in blocks]}
""")
        body = answer.structured_content
        assert not answer.is_error, body
        assert "image" in body["result"]["kinds"]
        [png] = images(answer)
        assert png_size(png)[0] > 0
        [shown] = body["result"]["shown"]
        assert (pkg_data / "workspace" / shown).read_bytes() == png


async def test_the_envelope_costs_little_beyond_the_answer(pkg_data: Path, tmp_path: Path):
    async with client(pkg_data, tmp_path) as c:
        one = await call(c, "result = 1")
        assert [b.type for b in one.content] == ["text"] and one.content[0].text == "1"
        printed = await call(c, "print('hello')\nresult = [1, 2]")
        assert printed.content[0].text == "hello\nresult: [1,2]"
        failed = await call(c, "def f():\n    return 1 / 0\nf()")
        text = failed.content[0].text
        assert failed.is_error and text.count("ZeroDivisionError") == 1, text
        assert text == failed.structured_content["traceback"].rstrip("\n")
        for answer in (one, printed, failed):
            assert "execution_time_ms" in answer.structured_content
