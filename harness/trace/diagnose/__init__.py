"""Why a step took what it took, from parsed traces: attribution to causes (`attribute*`,
`causes`), the cross-rank skew (`ranks`), the critical path, and `why` between two jobs.
The trace library (`harness.trace`) never imports this package."""
