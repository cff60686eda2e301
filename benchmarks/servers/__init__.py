"""The real-server benchmark's parts: the sites served (site), nginx's hosts and their
limits (hosts), HAProxy's and Apache's limited hosts (limiters), running each server
(nginx, nginx.conf.in; haproxy; apache) and reading their logs (accesslog, and each
server's own line format)."""
