"""The decorators' implementation, one module per job; import them from `pytriton.decorators`.

* ``common``: the forms of data passed around and the checks every decorator shares;
* ``shaping``: @batch and @sample (list of requests <-> keyword arrays);
* ``grouping``: @group_by_keys and @group_by_values (one call per group);
* ``padding``: `ConstantPadder`, @fill_optionals and @pad_batch;
* ``first_value``: @first_value;
* ``context``: @triton_context and the helpers for users' own decorators;
* ``results``: `map_result` and `gather`, which transform what a callable returns (lists,
  generators, coroutines) without consuming it early.
"""
