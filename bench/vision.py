"""Images on Hearth's llama.cpp engine: a second question about the same image, and the image encoder against
llama.cpp's own CLI.

    bash bench/build_peers.sh          # once (cached): llama-mtmd-cli from the same llama.cpp
    .venv/bin/python bench/vision.py [--runs 5] [--no-peer] [--json OUT]

No real vision model is downloaded: SmolLM2-135M gets a random projector the size of a small real encoder
(224 px in 16-pixel patches, 196 image tokens, six 384-wide blocks, made with tests/fixtures/tiny_projector.py),
so the work per image is real even though the answer is not. Same GGUF, projector, image and threads for both.

- TTFT of a follow-up question about the same image ÷ TTFT of the first question (target ≤ 0.15): the image's
  cells come from the slot's cache, so only the new text is read. Each pair starts from an empty cache.
- The image encoder's time in Hearth (GenerationStats.image_encode_s) ÷ llama-mtmd-cli's for the same image
  ("mtmd batch encoding done in … ms", from its log), target ≤ 1.05.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import add_json, add_peers, peer_dir  # noqa: E402
from engine import models  # noqa: E402

from app.core.engines.base import ChatMessage, GenerateRequest, ImageInput, LoadSpec, SamplingParams  # noqa: E402
from app.core.engines.llamacpp.engine import LlamaCppEngine  # noqa: E402
from app.core.engines.llamacpp.options import default_threads  # noqa: E402

IMAGE_SIZE, PATCH = 224, 16
FOLLOW_UP_TARGET = 0.15
ENCODE_TARGET = 1.05
ENCODED = re.compile(r"mtmd batch encoding done in (\d+) ms")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="engine threads (default: physical cores)")
    add_peers(parser)
    add_json(parser, "the ratios")
    return parser


def picture() -> bytes:
    """A 640×480 photo-like gradient with some structure (PNG), the same every run."""
    from PIL import Image, ImageDraw

    image = Image.linear_gradient("L").resize((640, 480)).convert("RGB")
    draw = ImageDraw.Draw(image)
    for i in range(12):
        draw.ellipse((40 * i, 30 * i % 400, 40 * i + 90, 30 * i % 400 + 70), fill=(20 * i, 255 - 20 * i, 120))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def ask(image: bytes, question: str) -> GenerateRequest:
    message = ChatMessage(role="user", content=question, images=[ImageInput(data=image)])
    return GenerateRequest(messages=[message], sampling=SamplingParams(temperature=0.0, max_tokens=1))


def final_stats(engine: LlamaCppEngine, request: GenerateRequest):
    chunks = list(engine.generate(request, threading.Event()))
    assert chunks[-1].stats is not None, chunks[-1]
    return chunks[-1].stats


def peer_encode_s(bins: Path, model: Path, projector: Path, image: Path, threads: int) -> float:
    """llama-mtmd-cli's encoder time for the image, from its log."""
    cli = bins / "llama-mtmd-cli"
    cmd = [str(cli), "-m", str(model), "--mmproj", str(projector), "--image", str(image), "-p", "Describe it."]
    cmd += ["-n", "1", "-t", str(threads), "--temp", "0", "-c", "2048"]  # warmed, as Hearth is by its first run
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    encoded = ENCODED.findall(log)
    if out.returncode != 0 or not encoded:
        raise RuntimeError(f"llama-mtmd-cli failed ({out.returncode}): {log[-800:]}")
    return sum(map(int, encoded)) / 1000


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tests.fixtures.tiny_projector import write_tiny_projector

    model = models(include_1b=False)["SmolLM2-135M Q4_1"]
    threads = args.threads or default_threads()
    work = Path(tempfile.mkdtemp(prefix="hearth-vision-bench-"))
    projector = write_tiny_projector(
        work / "mmproj-bench-F16.gguf",
        n_embd_text=576,
        n_embd=384,
        n_ff=1536,
        n_head=6,
        n_layer=7,  # LLaVA's layout runs all but the last block: six
        n_hidden=1024,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        std=0.02,
    )
    image = picture()
    (work / "image.png").write_bytes(image)

    engine = LlamaCppEngine()
    engine.load(LoadSpec(path=model, n_ctx=2048, n_threads=threads, slots=1, projector=projector))
    first, follow, encode = [], [], []
    try:
        final_stats(engine, ask(image, "Warm up."))
        for _ in range(args.runs):
            assert engine.sequences is not None
            engine.sequences.forget()
            one = final_stats(engine, ask(image, "Describe the picture."))
            two = final_stats(engine, ask(image, "Describe the picture. Which colours are in it?"))
            first.append(one.time_to_first_token_s)
            follow.append(two.time_to_first_token_s)
            encode.append(one.image_encode_s)
            assert two.images_encoded == 0, "the follow-up encoded the image again"
    finally:
        engine.unload()

    ratio = statistics.median(follow) / statistics.median(first)
    print(f"SmolLM2-135M + a random {IMAGE_SIZE}px/{PATCH}px projector, {threads} threads, {args.runs} runs (medians)")
    print(
        f"first question TTFT {statistics.median(first) * 1000:.0f} ms, follow-up about the same image "
        f"{statistics.median(follow) * 1000:.0f} ms: ratio {ratio:.3f} (target <= {FOLLOW_UP_TARGET})"
    )
    metrics = {"follow_up_ttft_ratio": {"value": ratio, "target": FOLLOW_UP_TARGET, "op": "<="}}
    ours = statistics.median(encode)
    bins = None if args.no_peer else peer_dir(args)
    if bins is not None and not (bins / "llama-mtmd-cli").is_file():
        print(f"no llama-mtmd-cli in {bins}: bash bench/build_peers.sh builds it (the encoder is not compared)")
        bins = None
    if bins is not None:
        peer = statistics.median(
            peer_encode_s(bins, model, projector, work / "image.png", threads) for _ in range(args.runs)
        )
        encode_ratio = ours / peer
        print(
            f"image encoder: Hearth {ours * 1000:.0f} ms, llama-mtmd-cli {peer * 1000:.0f} ms: "
            f"ratio {encode_ratio:.3f} (target <= {ENCODE_TARGET})"
        )
        metrics["encode_vs_mtmd_cli"] = {"value": encode_ratio, "target": ENCODE_TARGET, "op": "<="}
    else:
        print(f"image encoder: Hearth {ours * 1000:.0f} ms (no peer)")
    if args.json:
        args.json.write_text(json.dumps({"metrics": metrics}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
