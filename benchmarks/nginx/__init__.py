"""The nginx benchmark's parts: the sites it serves (site), its hosts and their limits
(hosts), running nginx (server, nginx.conf.in) and reading its access log (accesslog)."""
