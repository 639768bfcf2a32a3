"""A simulated vLLM upstream (Qwen3.5 vocabulary, scripted answers) for tests and demos."""

from .server import create_sim_app, run_sim
from .template import render_chat

__all__ = ["create_sim_app", "render_chat", "run_sim"]
