"""One GPU check, for users with a CUDA machine (not run by the project: its machines have no GPU).

(a) a tiny Llama built here goes through models/hf.py in bf16 on CUDA: a streamed reply, and a second turn that
    reuses the first one's KV cache (it computes only the new tokens and answers as a fresh call does);
(b) decode tokens/s of a random Llama of about 1B parameters (`--hidden`, `--layers`) against the bandwidth bound
    (bytes of weights read per token / the GPU's memory bandwidth, `--bandwidth-gbs`; H100 SXM 3,350, H200 4,800,
    A100 80GB 2,039, L4 300);
(c) 20 LoRA steps of `keem train-updater` on the GPU with a tiny random base and the bundled fixture dataset;
(d) FAISS on the GPU (needs faiss-gpu: `make install` adds it on a CUDA machine): `retrieval_scale.py --corpus`'s
    rows, one user's 100 sentences and a whole corpus of `--corpus-rows`, on the CPU and the GPU (single-query
    latency, batched queries/s, the GPU's top-5 against the CPU's): the figures behind per-user search staying on
    the CPU and whole-corpus search going to the GPU (memory/vector_index.py).

usage: python benchmarks/gpu_check.py [--bandwidth-gbs 4800] [--hidden 2048 --layers 16] [--skip-train]
                                      [--corpus-rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models import GenerationOptions
from models.hf import TransformersChatModel
from tests.conftest import build_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "evaluation" / "fixtures" / "updater_dataset.jsonl"


def check_reuse(folder: str) -> dict[str, object]:
    model = TransformersChatModel(folder, device="cuda")
    fresh = TransformersChatModel(folder, device="cuda", kv_cache_tokens=0)
    options = GenerationOptions(max_new_tokens=16, temperature=0.0)
    turns = [
        {"role": "system", "content": "사용자는 테니스를 치다가 손목을 다쳤다. " * 8},
        {"role": "user", "content": "안녕하세요 오늘 기분이 어때요?"},
    ]
    pieces = list(model.stream(turns, options))
    first = model.complete(turns, options)
    turns += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "손목은 좀 나았어"}]
    second = model.complete(turns, options)
    same = second.text == fresh.complete(turns, options).text
    return {
        "dtype": str(next(model.model.parameters()).dtype),
        "streamed_pieces": len(pieces),
        "second_turn_prompt_tokens": second.finish.prompt_tokens,
        "second_turn_cached_tokens": second.finish.cached_tokens,
        "same_answer_as_fresh": same,
    }


def decode_speed(hidden: int, layers: int, bandwidth_gbs: float, tokens: int = 128) -> dict[str, object]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        max_position_embeddings=4096,
    )
    model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, 32000, (1, 32), device="cuda")
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)  # warm-up
        torch.cuda.synchronize()
        started = time.perf_counter()
        model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        torch.cuda.synchronize()
    rate = tokens / (time.perf_counter() - started)
    bound = bandwidth_gbs * 1e9 / (params * 2)  # bf16: every weight read once per decoded token
    return {
        "params_b": round(params / 1e9, 3),
        "decode_tokens_s": round(rate, 1),
        "bandwidth_bound_tokens_s": round(bound, 1),
        "share_of_bound": round(rate / bound, 3),
    }


def train_steps(folder: str, out: Path) -> dict[str, object]:
    from chatbot.cli.main import main

    started = time.perf_counter()
    code = main(
        ["train-updater", str(DATA), "--base", f"hf:{folder}", "--out", str(out), "--max-steps", "20"]
        + ["--device", "cuda", "--no-progress"]
    )
    return {"exit_code": code, "seconds": round(time.perf_counter() - started, 1)}


def faiss_rows(rows: int) -> list[dict[str, object]] | str:
    from benchmarks.retrieval_scale import run_corpus
    from memory.vector_index import gpu_status

    status = gpu_status()
    if not status.usable:
        return f"skipped: {status.reason}"
    return run_corpus(rows, per_user=100, queries=300, batch=1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bandwidth-gbs", type=float, default=4800.0, help="GPU memory bandwidth, GB/s")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--corpus-rows", type=int, default=1_000_000, help="(d): sentences in the whole-corpus index")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU", file=sys.stderr)
        return 2
    result: dict[str, object] = {"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as tmp:
        prompts = ROOT / "memory" / "prompts"
        texts = [(prompts / f"{n}.txt").read_text(encoding="utf-8") for n in ("update", "chat_system")]
        texts += DATA.read_text(encoding="utf-8").splitlines()
        folder = build_tiny_llama(Path(tmp) / "tiny", texts, 1000)
        result["a_reuse"] = check_reuse(folder)
        result["b_decode"] = decode_speed(args.hidden, args.layers, args.bandwidth_gbs)
        if not args.skip_train:
            result["c_train"] = train_steps(folder, Path(tmp) / "updater")
    result["d_faiss"] = faiss_rows(args.corpus_rows)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
