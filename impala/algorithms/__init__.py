"""The built-in algorithms, one module each: `impala` (V-trace actor-critic with optional
LASER replay), `apex` and `r2d2` (value-based, sharing value.py). The registry
(impala/registry.py) finds every `Algorithm` subclass with a name in this package; the
interface they implement is impala/algorithm.py."""
