"""Flask app that speaks vLLM's OpenAI wire format, answering from scripted policies.

Concurrency: one threaded werkzeug server; the app's `RuleBook` and `RequestLog`
each guard their state with a lock. Nothing is module-global.
"""

from __future__ import annotations

import collections
import copy
import threading
import time

from flask import Flask, Response, jsonify, request

from ..serving import serve_forever
from . import tokenizer
from .completion import SimError, complete, prompt_ids
from .policies import PolicyError
from .rules import RuleBook
from .wire import WireOptions, completion_body, error_body, new_id, sse, stream_chunks

DEFAULT_MODEL = "polar-sim-qwen3"
DEFAULT_MAX_MODEL_LEN = 262144
REQUEST_LOG_SIZE = 100
VERSION = "0.0.0+polar-sim"


class RequestLog:
    """The last chat request bodies received, newest last."""

    def __init__(self, size: int = REQUEST_LOG_SIZE):
        self._lock = threading.Lock()
        self._items: collections.deque = collections.deque(maxlen=size)

    def add(self, body: dict) -> None:
        with self._lock:
            self._items.append(copy.deepcopy(body))

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def fail(status: int, message: str, err_type: str = "BadRequestError", param: str | None = None) -> Response:
    """An error response in vLLM's shape."""
    response = jsonify(error_body(message, err_type, status, param))
    response.status_code = status
    return response


def json_body() -> dict:
    """The request's JSON object, or a 400."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise SimError(400, "Request body must be a JSON object.")
    return body


def check_model(body: dict, served: str) -> None:
    """Reject a model name other than the served one, as vLLM does."""
    name = body.get("model")
    if name is not None and name != served:
        raise SimError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")


def wire_options(body: dict, served: str) -> WireOptions:
    """Response-shaping flags from a chat request."""
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or top < 0 or top > 20):
        raise SimError(400, "top_logprobs must be an integer between 0 and 20", param="top_logprobs")
    return WireOptions(
        model=served,
        request_id=new_id("chatcmpl"),
        created=int(time.time()),
        return_token_ids=bool(body.get("return_token_ids")),
        logprobs=bool(body.get("logprobs")),
        top_logprobs=top or 0,
        tokens_as_ids=bool(body.get("return_tokens_as_token_ids")),
        include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
    )


def chat_completions(app: Flask) -> Response:
    """POST /v1/chat/completions."""
    cfg = app.config
    body = json_body()
    check_model(body, cfg["SIM_MODEL"])
    if body.get("n", 1) != 1:
        raise SimError(400, "n must be 1 for this server", param="n")
    opts = wire_options(body, cfg["SIM_MODEL"])
    app.extensions["sim_requests"].add(body)
    policy = app.extensions["sim_rules"].select(body)
    if policy.get("delay_ms"):
        time.sleep(policy["delay_ms"] / 1000.0)
    if policy["kind"] == "error":
        status = int(policy.get("status", 500))
        return fail(status, policy.get("message", "simulated error"), policy.get("type", "InternalServerError"))
    result = complete(body, policy, cfg["SIM_MAX_MODEL_LEN"])
    if body.get("stream"):
        return Response(sse(stream_chunks(result, opts)), mimetype="text/event-stream")
    return jsonify(completion_body(result, opts))


def tokenize(app: Flask) -> Response:
    """POST /tokenize, chat form (same code path as completions) or completion form."""
    body = json_body()
    check_model(body, app.config["SIM_MODEL"])
    if "messages" in body:
        ids = prompt_ids(body)
    elif isinstance(body.get("prompt"), str):
        ids = tokenizer.encode(body["prompt"])
    else:
        raise SimError(400, "Either messages or a string prompt is required.")
    out = {"count": len(ids), "max_model_len": app.config["SIM_MAX_MODEL_LEN"], "tokens": ids}
    if body.get("return_token_strs"):
        out["token_strs"] = [tokenizer.token_str(i) for i in ids]
    return jsonify(out)


def detokenize(app: Flask) -> Response:
    """POST /detokenize."""
    body = json_body()
    check_model(body, app.config["SIM_MODEL"])
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(i, int) and 0 <= i < 248077 for i in ids):
        raise SimError(400, "tokens must be a list of valid token ids", param="tokens")
    return jsonify({"prompt": tokenizer.decode(ids)})


def models(app: Flask) -> Response:
    """GET /v1/models."""
    name = app.config["SIM_MODEL"]
    card = {"id": name, "object": "model", "created": app.config["SIM_CREATED"], "owned_by": "vllm",
            "root": name, "parent": None, "max_model_len": app.config["SIM_MAX_MODEL_LEN"]}
    return jsonify({"object": "list", "data": [card]})


def sim_rules(app: Flask) -> Response:
    """GET/POST/DELETE /sim/rules."""
    book: RuleBook = app.extensions["sim_rules"]
    if request.method == "POST":
        rules = request.get_json(silent=True)
        try:
            book.add(rules, replace=request.args.get("replace") in ("1", "true"))
        except PolicyError as exc:
            raise SimError(400, str(exc)) from exc
    elif request.method == "DELETE":
        book.clear()
    return jsonify(book.snapshot())


def sim_requests(app: Flask) -> Response:
    """GET/DELETE /sim/requests."""
    log: RequestLog = app.extensions["sim_requests"]
    if request.method == "DELETE":
        log.clear()
    return jsonify(log.snapshot())


def create_sim_app(model: str = DEFAULT_MODEL, max_model_len: int = DEFAULT_MAX_MODEL_LEN,
                   rules: list | None = None) -> Flask:
    """A simulated `vllm serve` of Qwen3.5 with qwen3_coder tools and qwen3 reasoning."""
    app = Flask(__name__)
    app.config.update(SIM_MODEL=model, SIM_MAX_MODEL_LEN=max_model_len, SIM_CREATED=int(time.time()))
    app.json.sort_keys = False
    app.json.ensure_ascii = False
    app.extensions["sim_rules"] = RuleBook(rules)
    app.extensions["sim_requests"] = RequestLog()
    tokenizer.get_vocab()

    routes = [
        ("/v1/chat/completions", ["POST"], chat_completions),
        ("/tokenize", ["POST"], tokenize),
        ("/detokenize", ["POST"], detokenize),
        ("/v1/models", ["GET"], models),
        ("/sim/rules", ["GET", "POST", "DELETE"], sim_rules),
        ("/sim/requests", ["GET", "DELETE"], sim_requests),
    ]
    for path, methods, view in routes:
        app.add_url_rule(path, view.__name__, lambda view=view: view(app), methods=methods)
    app.add_url_rule("/version", "version", lambda: jsonify({"version": VERSION}))
    app.add_url_rule("/health", "health", lambda: Response(status=200))

    @app.errorhandler(SimError)
    def sim_error(exc: SimError):
        return fail(exc.status, exc.message, exc.err_type, exc.param)

    @app.errorhandler(404)
    def not_found(exc):
        return fail(404, f"Not Found: {request.path}", "NotFoundError")

    @app.errorhandler(405)
    def not_allowed(exc):
        return fail(405, "Method Not Allowed", "MethodNotAllowed")

    return app


def run_sim(host: str = "127.0.0.1", port: int = 8000, model: str = DEFAULT_MODEL,
            max_model_len: int = DEFAULT_MAX_MODEL_LEN) -> None:
    """Serve the simulator until interrupted (threaded werkzeug server)."""
    serve_forever(create_sim_app(model, max_model_len), host, port)
