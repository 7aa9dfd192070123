"""Lower bounds on a plan's cost (SciPy/HiGHS): what the benchmarks and the planner's tests
measure plans against. Development-only, never in the Lambda layer."""
