"""What runs a layout: command lines, units, the process supervisor, the JIT toolchain, the venv's pins."""
