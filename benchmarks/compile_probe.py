#!/usr/bin/env python
"""torch.compile (inductor) of a causal LM's training step against eager, on this machine. Not a test.

    python benchmarks/compile_probe.py                      # tiny and small presets, ≈ 5 min on 2 cores
    python benchmarks/compile_probe.py --presets smollm2    # SmolLM2-135M-Instruct (fetched once), ≈ 6 min
    python benchmarks/compile_probe.py --decode             # the lean decoder's one-token step instead

One training step = forward of a (B, L) batch, token cross-entropy, backward (the shape of an SFT or
GRPO micro-batch). Two copies of the same weights: one eager, one under ``torch.compile``; the first
compiled call (compilation) is timed on its own, then eager and compiled steps alternate (the load of a
shared machine moves within seconds) and the medians are compared. ``--dynamic`` compiles once for
varying lengths (L, 3L/4, L/2 in turn; ``dynamic=True``) instead of one fixed shape. Parity: the loss
and the logits of both copies on one batch before any update (fp32 round-off expected).

Compilation is timed with an empty inductor cache by default (``--cache cold``: what a first run pays;
``warm`` reuses the cache earlier runs filled, as later runs of the same shapes do).

``--decode``: the lean decoder's one-token step (`seqrl.rollout.lean.LeanDecoder`'s layers, fp32) written
once as a function of static shapes (every cache slot attended, the unwritten ones masked; the step's
column a tensor, so one compilation serves every step) and run eager and under ``torch.compile`` on the
same cache, alternating; beside them the shipping `LeanDecoder.step` (packed weights, attention over the
written slots only: less work, the figure to beat). ``--batch`` rows, ``--length`` cached prompt slots, then
``--decode-steps`` steps per timed run.

The printed lines are one JSON object per preset: compile seconds, step medians, their ratio
(compiled / eager, < 1: compiled faster), the steps after which compiling has paid for itself, parity;
then one line with all of them, the CPU's capabilities and the load.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="tiny,small", help="comma-separated: tiny, small, smollm2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64, help="tokens per row (L)")
    ap.add_argument("--repeats", type=int, default=8, help="alternating eager/compiled step pairs")
    ap.add_argument("--dynamic", action="store_true", help="dynamic=True over lengths L, 3L/4, L/2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decode", action="store_true", help="time the lean decoder's one-token step instead")
    ap.add_argument("--decode-steps", type=int, default=48, help="--decode: steps per timed run")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    ap.add_argument("--cache", choices=("cold", "warm"), default="cold",
                    help="cold: inductor's compile cache in a new empty folder (a user's first run); warm: the "
                         "default cache, as filled by earlier runs of the same shapes")
    args = ap.parse_args()
    if args.cache == "cold":
        import tempfile

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="seqrl-inductor-")
    import torch
    import torch.nn.functional as F

    from _warm_start import preset_policy  # benchmarks/, the script's own folder

    torch.set_num_threads(args.threads)
    if args.decode:
        return decode_probe(args)
    lengths = [args.length, args.length * 3 // 4, args.length // 2] if args.dynamic else [args.length]
    results = []
    for preset in [p for p in args.presets.split(",") if p]:
        torch.manual_seed(0)
        model = preset_policy(preset, max(128, args.length)).model
        model.to(args.device).train()
        twin = copy.deepcopy(model)
        compiled = torch.compile(twin, dynamic=args.dynamic)
        vocab = model.config.vocab_size
        gen = torch.Generator().manual_seed(1)

        def batch(length: int) -> torch.Tensor:
            return torch.randint(3, vocab, (args.batch, length), generator=gen).to(args.device)  # (B, L)

        def step(m, ids: torch.Tensor) -> tuple[float, torch.Tensor]:
            logits = m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits  # (B, L, V)
            loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, vocab), ids[:, 1:].reshape(-1))
            loss.backward()
            return loss.item(), logits.detach()  # .item() waits for a GPU: the step is timed whole

        ids = batch(lengths[0])
        t = time.perf_counter()
        loss_c, logits_c = step(compiled, ids)
        compile_s = time.perf_counter() - t
        loss_e, logits_e = step(model, ids)
        parity = {"loss_abs_diff": abs(loss_c - loss_e), "logits_max_abs_diff": float((logits_c - logits_e).abs().max())}
        t = time.perf_counter()
        for length in lengths[1:]:  # the other shapes compile now, not inside the timed steps
            step(compiled, batch(length))
        recompile_s = time.perf_counter() - t
        eager, comp = [], []
        for r in range(args.repeats):
            ids = batch(lengths[r % len(lengths)])
            for m, times in ((model, eager), (compiled, comp)) if r % 2 == 0 else ((compiled, comp), (model, eager)):
                m.zero_grad(set_to_none=True)
                t = time.perf_counter()
                step(m, ids)
                times.append(time.perf_counter() - t)
        res = {"preset": preset, "parameters": sum(p.numel() for p in model.parameters()), "batch": args.batch,
               "lengths": lengths, "dynamic": args.dynamic, "compile_s": round(compile_s, 1),
               "other_shapes_s": round(recompile_s, 1), "eager_ms": round(1000 * statistics.median(eager), 1),
               "compiled_ms": round(1000 * statistics.median(comp), 1),
               "ratio": round(statistics.median(comp) / statistics.median(eager), 3),
               "break_even_steps": (round(compile_s / max(statistics.median(eager) - statistics.median(comp), 1e-9))
                                    if statistics.median(comp) < statistics.median(eager) else None),
               **{k: float(f"{v:.2e}") for k, v in parity.items()}}
        print(json.dumps(res), flush=True)
        results.append(res)
    print_summary("compile_probe", results, args)


def print_summary(bench: str, results: list[dict], args) -> None:
    """The last line: every result, the CPU's bf16 capabilities, torch and the load."""
    import torch

    caps = dict(torch.cpu.get_capabilities())
    print(json.dumps({"bench": bench, "results": results, "threads": args.threads, "cache": args.cache,
                      "torch": torch.__version__, "avx512_bf16": bool(caps.get("avx512_bf16")),
                      "amx_bf16": bool(caps.get("amx_bf16")), "load_avg_1m": round(os.getloadavg()[0], 2)}))


def static_step(dec):
    """`dec`'s decode step as a function of static shapes: (token (A,), positions (A,), col ()) -> logits (A, V).
    Attends over every slot of the cache, those after `col` masked; writes K/V into column `col`."""
    import torch
    import torch.nn.functional as F

    from seqrl.rollout.lean import _rotate

    h, hkv, d = dec.heads, dec.kv_heads, dec.head_dim
    slots = torch.arange(dec.kv.shape[4])

    def step(token, positions, col):
        a = token.shape[0]
        cos, sin = dec.cos[positions][:, None], dec.sin[positions][:, None]  # (A, 1, D)
        bias = torch.zeros(slots.shape, dtype=torch.float32).masked_fill(slots > col, float("-inf"))  # (S,)
        x = F.embedding(token, dec.embed)  # (A, d)
        for i, (ln1, wqkv, bqkv, wo, bo, ln2, wgu, bgu, wd, bd) in enumerate(dec.layers):
            y = F.rms_norm(x, (dec.hidden,), ln1, dec.eps)
            qkv = F.linear(y, wqkv, bqkv).view(a, h + 2 * hkv, d)
            qk = _rotate(qkv[:, : h + hkv], cos, sin)
            dec.kv[0, i, :a, :, col.view(1)] = qk[:, h:, None]  # index_put_: inductor writes it in place
            dec.kv[1, i, :a, :, col.view(1)] = qkv[:, h + hkv:, None]
            q = (qk[:, :h] * dec.scale).view(a, hkv, h // hkv, d)
            probs = (torch.matmul(q, dec.kv[0, i, :a].transpose(-1, -2)) + bias).softmax(-1)  # (A, Hkv, G, S)
            x = x + F.linear(torch.matmul(probs, dec.kv[1, i, :a]).reshape(a, h * d), wo, bo)
            y = F.rms_norm(x, (dec.hidden,), ln2, dec.eps)
            gate, up = F.linear(y, wgu, bgu).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, wd, bd)
        return F.linear(F.rms_norm(x, (dec.hidden,), dec.norm, dec.eps), dec.lm_head)

    return step


def decode_probe(args) -> None:
    import torch

    from _warm_start import preset_policy
    from seqrl.rollout import lean

    torch.set_num_threads(args.threads)
    results = []
    for preset in [p for p in args.presets.split(",") if p]:
        torch.manual_seed(0)
        model = preset_policy(preset, max(128, args.length + args.decode_steps)).model.eval()
        rows, prompt, steps = args.batch, args.length, args.decode_steps
        slots = prompt + steps
        decs = {}
        for name, pack in (("static", False), ("shipping", None)):
            lean.PACK_WEIGHTS = pack
            decs[name] = lean.LeanDecoder(model, rows, slots)
        lean.PACK_WEIGHTS = None
        fill = torch.randn(decs["static"].kv[:, :, :, :, :prompt].shape)
        vocab = model.config.vocab_size
        gen = torch.Generator().manual_seed(1)
        tokens = torch.randint(3, vocab, (steps, rows), generator=gen)
        eager = static_step(decs["static"])
        compiled = torch.compile(eager, dynamic=False)

        def reset():
            for dec in decs.values():
                dec.kv[:, :, :, :, :prompt] = fill
                dec.kv[:, :, :, :, prompt:] = 0
                dec.used, dec.rows, dec.width, dec.slot, dec.padded = prompt, rows, prompt, None, False

        def run(fn) -> tuple[float, torch.Tensor]:
            reset()
            t = time.perf_counter()
            with torch.no_grad():
                for j in range(steps):
                    pos = torch.full((rows,), prompt + j)
                    logits = fn(tokens[j], pos, j)
            return (time.perf_counter() - t) / steps, logits

        fns = {"eager": lambda tok, pos, j: eager(tok, pos, torch.tensor(prompt + j)),
               "compiled": lambda tok, pos, j: compiled(tok, pos, torch.tensor(prompt + j)),
               "shipping": lambda tok, pos, j: decs["shipping"].step(tok, pos)}
        run(fns["eager"])  # warm-up: first calls allocate and pick kernels
        reset()
        t = time.perf_counter()
        with torch.no_grad():
            compiled(tokens[0], torch.full((rows,), prompt), torch.tensor(prompt))
        compile_s = time.perf_counter() - t
        times: dict[str, list[float]] = {k: [] for k in fns}
        last = {}
        for r in range(args.repeats):
            for name in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                dt, last[name] = run(fns[name])
                times[name].append(dt)
        med = {k: statistics.median(v) for k, v in times.items()}
        res = {"preset": preset, "mode": "decode", "parameters": sum(p.numel() for p in model.parameters()),
               "rows": rows, "prompt_slots": prompt, "steps": steps, "compile_s": round(compile_s, 1),
               **{f"{k}_ms_per_step": round(1000 * v, 3) for k, v in med.items()},
               "compiled_vs_eager": round(med["compiled"] / med["eager"], 3),
               "compiled_vs_shipping": round(med["compiled"] / med["shipping"], 3),
               "logits_max_abs_diff_compiled": float(f"{(last['compiled'] - last['eager']).abs().max():.2e}"),
               "logits_max_abs_diff_shipping": float(f"{(last['shipping'] - last['eager']).abs().max():.2e}")}
        print(json.dumps(res), flush=True)
        results.append(res)
    print_summary("compile_probe_decode", results, args)


if __name__ == "__main__":
    main()
