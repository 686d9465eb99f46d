"""The node wing: CPU, memory, swap, disk, network and sensors from psutil on its thread (docs/spec.md section 10)."""
