"""`hearth run … --image FILE` and `/image FILE` in `hearth chat`, as subprocesses on the tiny model with its
projector beside it (LM Studio's layout): the image's tokens join the prompt; a model without a projector, or a
file that is not an image, fails clearly (a bad file before the model loads), and the chat goes on."""

from __future__ import annotations

import io
import shutil

import pytest
from PIL import Image

from tests.cli.test_engine import ROOT, STATS, hearth
from tests.fixtures.tiny_projector import TOKENS_PER_IMAGE
from tests.helpers import require_llama_cpp

pytestmark = pytest.mark.slow


@pytest.fixture
def seeing(tiny_gguf_f16, tiny_mmproj, tmp_path):
    require_llama_cpp()
    folder = tmp_path / "seeing"
    folder.mkdir()
    shutil.copy(tiny_gguf_f16, folder / "tiny-seeing-F16.gguf")
    shutil.copy(tiny_mmproj, folder / "mmproj-tiny-seeing-F16.gguf")
    red = tmp_path / "red.png"
    out = io.BytesIO()
    Image.new("RGB", (40, 30), (220, 20, 30)).save(out, format="PNG")
    red.write_bytes(out.getvalue())
    return folder / "tiny-seeing-F16.gguf", red


def run(*args: str, stdin: str | None = None):
    import subprocess

    return subprocess.run(hearth(*args), cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=300)


def prompt_tokens(stderr: str) -> list[int]:
    return [int(m[0]) for m in STATS.findall(stderr)]


def test_run_with_an_image_adds_its_tokens_to_the_prompt(seeing):
    model, red = seeing
    plain = run("run", str(model), "What is this?", "--temp", "0", "--max-tokens", "3")
    looked = run("run", str(model), "What is this?", "--image", str(red), "--temp", "0", "--max-tokens", "3")
    assert plain.returncode == 0 and looked.returncode == 0, plain.stderr + looked.stderr
    assert prompt_tokens(looked.stderr) == [prompt_tokens(plain.stderr)[0] + TOKENS_PER_IMAGE]


def test_a_file_that_is_not_an_image_fails_before_the_model_loads(seeing, tmp_path):
    model, _ = seeing
    junk = tmp_path / "notes.png"
    junk.write_text("not a picture")
    proc = run("run", str(model), "What is this?", "--image", str(junk))
    assert proc.returncode == 2 and "notes.png" in proc.stderr and "loaded" not in proc.stderr


def test_a_model_without_a_projector_says_it_cannot_see(tiny_gguf_f16, seeing, tmp_path):
    require_llama_cpp()
    blind = tmp_path / "blind" / "tiny-blind-F16.gguf"
    blind.parent.mkdir()
    shutil.copy(tiny_gguf_f16, blind)
    proc = run("run", str(blind), "What is this?", "--image", str(seeing[1]))
    assert proc.returncode == 1 and "cannot see images" in proc.stderr


def test_chat_takes_an_image_for_the_next_message_and_a_bad_one_does_not_end_it(seeing, tmp_path):
    model, red = seeing
    lines = f"/image {tmp_path / 'missing.png'}\n/image {red}\nWhat is this?\nAnd now?\n"
    proc = run("chat", str(model), "--temp", "0", "--max-tokens", "3", stdin=lines)
    assert proc.returncode == 0, proc.stderr
    assert "missing.png could not be read" in proc.stderr
    assert "(image red.png goes with your next message)" in proc.stderr
    first, second = prompt_tokens(proc.stderr)
    assert second > first > TOKENS_PER_IMAGE  # the image stays in the history
