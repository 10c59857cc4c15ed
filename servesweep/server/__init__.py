"""One server's lifecycle: launch in its own process group, readiness, watchdog, teardown,
failure causes, its GPUs and telemetry, and one adapter per engine (`engines/`)."""
