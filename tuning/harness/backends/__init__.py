"""Where runs happen: Docker (engine, Compose render and lifecycle, image builds), the
host's processes, and Kubernetes objects rendered from a layout."""
