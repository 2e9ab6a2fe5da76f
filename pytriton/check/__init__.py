"""`pytriton check`: can this machine (or container image) run a pytriton server?

A tool beside the serving path, run by ``python -m pytriton check`` (`pytriton.__main__`) and by
container builds: `pytriton.check.runtime` holds the checks of the machine a server runs on
(/dev/shm, GPU, ports, metrics and tracing, the workspace folder) and `run_checks`, which runs
them all; `pytriton.check.install` the checks of the install (glibc, libpython, the server tree
and its stub, a throwaway server); `pytriton.check.verdicts` a check's outcome and how the
command line shows and sums them up. It uses the server package; nothing of the server imports it,
except `pytriton.facade.launch`, which probes the ports before a start the way the check does.
"""
