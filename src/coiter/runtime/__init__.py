"""Run-time support: compile generated C, cache the shared libraries, load them via ctypes."""
from .compiler import cache_dir, clear_cache, clear_memory_cache, compile_library, load_library

__all__ = ["cache_dir", "clear_cache", "clear_memory_cache", "compile_library", "load_library"]
