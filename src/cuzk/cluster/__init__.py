"""Many hosts as one prover, on Ray: one cuzk engine per Ray node behind a front door that speaks the daemon's API.

``routing`` (the pure decision: which host, or wait, or why none), ``host`` (the engine actor
on one node), ``frontdoor`` (``ClusterEngine``: journal, dispatch, failover), ``serve``
(``cuzk cluster serve``). Everything but ``routing`` needs the ``cluster`` extra (Ray).
"""
