"""tilewright backend for Huawei Ascend A2/A3 NPUs (Ascend C route), with a CPU emulator."""

__version__ = "0.1.0"
