"""Jepsen-style fault campaigns against bkfast: hosts in network namespaces (netns.py), their processes
(cluster.py), the workload (client_proc.py), the nemesis (nemesis.py), the history checker (checker.py),
one campaign (campaign.py), and `python -m tests.faults` for long runs (__main__.py)."""
