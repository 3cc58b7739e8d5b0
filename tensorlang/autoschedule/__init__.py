"""The auto-scheduler: a search over legal schedule traces, ranked by a cost model.

It sits above the driver (it builds and times candidates) and below the graph layer (the
executor's schedules come from it). Its modules:

- `search`: `tl.auto_schedule`, the search and its measurement budget;
- `records`: a result's candidates, the tuning log's key, and replaying a recorded trace;
- `sample`: candidates drawn from sketches (register tiles, channel tiles, vector partials,
  wavefronts, tiled vectors), legal by construction;
- `mutate`: a trace's sketch and its factor mutation;
- `cost`: the analytic model of a schedule's time, from the placed statements' isl facts
  (`placed`), their register blocks (`compute`), their data movement (`traffic`) and the
  cores their parallel loop occupies (`parallel`);
- `measure`: timing kernels on the host; `tuning_log`: the JSON-lines log of records.
"""

from .search import AutoResult, Candidate, auto_schedule  # noqa: F401
