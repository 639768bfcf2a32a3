"""The gateway proxy: four provider APIs in, one OpenAI Chat upstream out, every token captured.

Provider modules are pure (dict in, dict out, events out); Flask lives only in ``proxy.app``.
"""

from polar_jobs.proxy.detection import detect
from polar_jobs.proxy.service import ProxyOptions, ProxyOutcome, ProxyService
from polar_jobs.proxy.upstream import ModelInfo, UpstreamClient

__all__ = ["ModelInfo", "ProxyOptions", "ProxyOutcome", "ProxyService", "UpstreamClient", "detect"]
