"""Model builds, the Triton-layout model repository, the KServe v2 codec and the embedded server."""
