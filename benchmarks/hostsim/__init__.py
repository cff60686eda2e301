"""A fake-clock benchmark of a host controller against model hosts.

``python -m benchmarks.hostsim`` (from the repository root, with ``PYTHONPATH=.``)
prints a controller's score on the tuning set and on the held-out set: its pages
over those of the best fixed-setting crawler. ``models``: the hosts; ``driver``:
the crawler's loop over the pinned controller API; ``reference``: the best fixed
crawler; ``sets``: the two sets; ``bench``: the score. See benchmarks/README.md.
"""
