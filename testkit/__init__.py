"""What the tests (tests/) and the benchmarks (bench/) share, so that neither imports
the other: waiting, the captured KubeRay reviews and objects built from them,
raykueue's server as a process, stand-ins for Kueue and the kubelet on a real API
server, histogram math, a signal-safe run. Not installed: the wheel holds only
`raykueue`."""
