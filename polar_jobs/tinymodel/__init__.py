"""The real-engine tier's tiny model: builder (runs under the vLLM venv), chat template, scripted processor.

Nothing here is imported by the proxy or the base package; ``build`` and ``scripted`` need the vLLM
virtual environment (transformers, torch, vllm), ``template`` is pure.
"""
