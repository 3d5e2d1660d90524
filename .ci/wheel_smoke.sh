#!/usr/bin/env bash
# The package, not the checkout: build the sdist and, from it, the wheel; install the wheel into a fresh
# virtual environment (dependencies at constraints.txt's versions) and use the `seqrl` command from an
# empty folder, with nothing of the checkout on the path.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PY:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
unset PYTHONPATH
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
t0=$SECONDS
step() { echo "wheel smoke [$((SECONDS - t0)) s]: $*"; }

step "build sdist and wheel"
"$PY" -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q -c constraints.txt build
"$WORK/tools/bin/python" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
wheel=$(echo "$WORK"/dist/seqrl-*.whl)
test -f "$wheel" && test -f "$(echo "$WORK"/dist/seqrl-*.tar.gz)"
"$WORK/tools/bin/python" - "$wheel" <<'EOF'
import re, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
meta = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
pins = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and re.search(r"===?", line.split(";")[0])]
assert not pins, f"exact pins in the wheel's Requires-Dist (they belong in constraints.txt): {pins}"
EOF

step "install the wheel into a fresh venv (the base install: the language-model side)"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q --no-compile -c constraints.txt "$wheel"   # no .pyc: the install takes half the CPU (29 s, not 60 s)
step "base install: $(du -sm "$WORK/venv" | cut -f1) MiB ($("$WORK/venv/bin/pip" list 2>/dev/null | tail -n +3 | wc -l) packages)"
for module in minari stable_baselines3 minigrid reasoning_gym mujoco wandb; do
  if "$WORK/venv/bin/python" -c "import $module" 2>/dev/null; then echo "wheel smoke: $module in the base install"; exit 1; fi
done
seqrl="$WORK/venv/bin/seqrl"
mkdir "$WORK/empty" && cd "$WORK/empty"
pkg=$("$WORK/venv/bin/python" -c 'import pathlib, seqrl; print(pathlib.Path(seqrl.__file__).parent)')
[[ $pkg == "$WORK/venv/"*"/site-packages/seqrl" ]] || { echo "wheel smoke: seqrl imported from $pkg, not the wheel"; exit 1; }
touch "$WORK/installed"

step "seqrl --version"
version=$("$seqrl" --version)
expected="seqrl $("$WORK/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("seqrl"))')"
[ "$version" = "$expected" ] || { echo "wheel smoke: --version says '$version', metadata '$expected'"; exit 1; }

step "seqrl configs ls: every preset of the checkout"
listed=$("$seqrl" configs ls | cut -d' ' -f1)
in_checkout=$(cd "$REPO/src/seqrl/configs" && ls -- */*.yaml | sed 's/\.yaml$//' | LC_ALL=C sort)
diff <(echo "$listed" | LC_ALL=C sort) <(echo "$in_checkout") || { echo "wheel smoke: presets differ (< wheel, > checkout)"; exit 1; }
"$seqrl" configs show arith_tiny >mine.yaml && "$seqrl" train sft --config mine.yaml --print-config >/dev/null

step "2-step SFT (preset arith_tiny)"
"$seqrl" train sft --config arith_tiny --steps=2 --eval.every=0 --task.n_train=64 --task.n_test=8 \
  --run.progress=false >"$WORK/sft.log" 2>&1 || { cat "$WORK/sft.log"; exit 1; }
test -f runs/sft_arith_tiny/checkpoint-2/model.safetensors

step "math reward"
"$seqrl" reward math --pred '<answer>\frac{1}{2}</answer>' --gold 0.5 --json \
  | "$WORK/venv/bin/python" -c 'import json, sys; r = json.load(sys.stdin); assert r["score"] == 1.0, r'

step "sandbox run"
printf 'def add(a, b):\n    return a + b\n' >solution.py
printf 'assert add(2, 3) == 5\nassert add(-1, 1) == 0\n' >tests.py
"$seqrl" sandbox run solution.py --tests tests.py --entry-point add --json \
  | "$WORK/venv/bin/python" -c 'import json, sys; r = json.load(sys.stdin); assert (r["status"], r["passed"]) == ("ok", 2), r'

step "a command that needs an extra says which, in one line"
if "$seqrl" train bc --config pendulum_medium_replay --steps=1 --run.progress=false >extra.out 2>extra.err; then
  echo "wheel smoke: train bc ran without the [control] extra"; exit 1
fi
grep -q "pip install 'seqrl\[control\]'" extra.err && [ "$(wc -l <extra.err)" -eq 1 ] \
  || { echo "wheel smoke: no one-line [control] message:"; cat extra.err; exit 1; }

step "the extras: [control,vla,rgym,trackers]"
"$WORK/venv/bin/pip" install -q --no-compile -c "$REPO/constraints.txt" "$wheel[control,vla,rgym,trackers]"
"$WORK/venv/bin/python" -W ignore -c 'import minari, stable_baselines3, minigrid, reasoning_gym, mujoco, tensorboard, wandb'
step "with the extras: $(du -sm "$WORK/venv" | cut -f1) MiB"

written=$(find "$pkg" -newer "$WORK/installed" -type f -not -path '*/__pycache__/*')
[ -z "$written" ] || { echo "wheel smoke: files written inside the installed package: $written"; exit 1; }
step "passed ($version, $(basename "$wheel"))"
