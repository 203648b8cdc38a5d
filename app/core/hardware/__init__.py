"""Hardware detection: what this machine can run, and how fast it reads memory."""

from app.core.hardware.probe import probe_hardware
from app.core.hardware.profile import HardwareProfile

__all__ = ["HardwareProfile", "probe_hardware"]
