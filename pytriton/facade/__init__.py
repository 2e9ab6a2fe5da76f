"""The facade: what a script calls (`bind`, `run`, `serve`, `stop`), wiring the bindings to a tritonserver.

The published names live in ``pytriton.triton`` (`Triton`, `TritonConfig`, ...) and
``pytriton.remote`` (`RemoteTriton`), which re-export them from here. Inside, one step a module,
each importing only those listed before it:

* ``bound``: the models a facade serves, by name and version;
* ``binding``: a bound callable -> worker handlers and a model folder (and the signal watch);
* ``launch``: the tritonserver process started, and the waits until what it serves answers;
* ``drain``: a stop that answers what was accepted and refuses the rest;
* ``versions``: a version loaded beside those serving, or unbound (a swap);
* ``triton``: `Triton`, a tritonserver this process starts; ``remote``: `RemoteTriton`, one
  that something else started.
"""
