"""The resume bridge: wakes a waiting agent session when its task or group needs it."""

from fedhpc.bridge.payload import HARD_CAP, SINGLE_CAP, TARGET, build_payload, prompt_text
from fedhpc.bridge.service import Bridge

__all__ = ["HARD_CAP", "SINGLE_CAP", "TARGET", "Bridge", "build_payload", "prompt_text"]
