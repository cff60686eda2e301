"""One host's web site: a few sections of Python's HTML documentation, as a mirror serves
them, and the link graph a crawler that follows every link walks on it.

The pages are Debian's ``python3-doc`` (Sphinx output, real sizes and real link
structure). A host serves only its sections, so the site is kept closed: a link to
another section, or off-site (``https:``, ``mailto:``), loses its ``href`` (its text
stays), because the crawl may only reach 127.0.0.0/8. Links to the documentation's
top-level pages (``genindex.html``, ``search.html``, ``copyright.html`` ...) stay, and
answer 404, as broken links on a real site do; ``/index.html`` is the host's generated
home page, which links to each section's index.
"""

from __future__ import annotations

import heapq
import html
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

from parsel import Selector

#: Where Debian's python3-doc puts the HTML documentation.
DOCS = Path("/usr/share/doc/python3/html")

_A_TAG = re.compile(r"<a\b[^>]*>", re.IGNORECASE)
_HREF = re.compile(r"""\s+href\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)
_BASE = "http://site"

NOT_FOUND_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n"
    b'<body><h1>Not Found</h1><p>No such page. <a href="/index.html">Home</a></p></body></html>\n'
)


@dataclass
class Site:
    """What a host serves, and what a crawl of it must ask for."""

    root: Path
    sizes: dict[str, int]
    """Bytes of every file served with 200, by URL path."""
    links: dict[str, list[str]]
    """Each page's outgoing links, resolved to paths on the host, as a spider sees them."""
    disallowed: tuple[str, ...] = ()
    """robots.txt ``Disallow`` prefixes."""
    pages: set[str] = field(default_factory=set)
    """Pages reachable from ``/`` (served with 200, allowed by robots.txt)."""
    broken: set[str] = field(default_factory=set)
    """Reachable links that answer 404."""

    def allowed(self, path: str) -> bool:
        return not any(path.startswith(prefix) for prefix in self.disallowed)

    @property
    def not_found_bytes(self) -> int:
        return len(NOT_FOUND_PAGE)

    def requests(self) -> list[str]:
        """Every path a complete, polite crawl asks for once: robots.txt, the pages, the
        broken links."""
        return ["/robots.txt", *sorted(self.pages), *sorted(self.broken)]

    def size(self, path: str) -> int:
        return self.sizes.get(path, self.not_found_bytes)

    def longest_chain(self, fetch_seconds: Callable[[int], float]) -> float:
        """The least time to reach the last page when a fetch of a body of n bytes
        takes ``fetch_seconds(n)`` and links are followed as soon as a page is in
        (robots.txt first): the longest of the shortest paths from the home page."""
        start = fetch_seconds(self.size("/robots.txt"))
        best = {"/": start + fetch_seconds(self.size("/"))}
        todo = [(best["/"], "/")]
        while todo:
            done, path = heapq.heappop(todo)
            if done > best[path]:
                continue
            for target in self.links.get(path, []):
                if not self.allowed(target):
                    continue
                arrival = done + fetch_seconds(self.size(target))
                if arrival < best.get(target, float("inf")):
                    best[target] = arrival
                    heapq.heappush(todo, (arrival, target))
        return max(best.values())


def resolve(page: str, href: str) -> str | None:
    """The path on the same host that ``href`` on ``page`` leads to, as a spider's
    ``response.follow`` resolves it (fragment dropped); None for another host."""
    url = urldefrag(urljoin(_BASE + page, href.strip()))[0]
    parts = urlsplit(url)
    if f"{parts.scheme}://{parts.netloc}" != _BASE:
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def page_links(page: str, body: bytes) -> list[str]:
    """The links a follow-every-link spider extracts (``a::attr(href)``), resolved."""
    selector = Selector(text=body.decode("utf-8", errors="replace"))
    found = (resolve(page, href) for href in selector.css("a::attr(href)").getall())
    return [path for path in found if path is not None]


def is_html(path: str) -> bool:
    return path.endswith(".html")


def is_top_level(path: str) -> bool:
    return path.count("/") == 1 and is_html(path)


def close_links(page: str, text: str, served: set[str]) -> str:
    """``text`` with the ``href`` dropped from every link that leaves the site (another
    section or another host); top-level pages keep theirs (most answer 404)."""

    def keep(href: str) -> bool:
        target = resolve(page, html.unescape(href))
        if target is None:
            return False
        return urlsplit(target).path in served or is_top_level(urlsplit(target).path)

    def fix(tag: re.Match[str]) -> str:
        found = _HREF.search(tag.group(0))
        if found is None or keep(found.group(1) if found.group(1) is not None else found.group(2)):
            return tag.group(0)
        return tag.group(0)[: found.start()] + tag.group(0)[found.end() :]

    return _A_TAG.sub(fix, text)


def home_page(title: str, sections: Iterable[str]) -> bytes:
    items = "\n".join(f'<li><a href="{s}/index.html">{s}</a></li>' for s in sections)
    return (
        f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n<ul>\n{items}\n</ul>\n"
        '<p><a href="genindex.html">Index</a> <a href="search.html">Search</a></p>\n'
        "</body></html>\n"
    ).encode()


def build_site(
    root: Path,
    sections: list[str],
    *,
    robots_txt: str | None = None,
    disallowed: tuple[str, ...] = (),
    docs: Path = DOCS,
) -> Site:
    """Write a host's document root (its sections, a home page, a 404 page and, when
    given, robots.txt) and walk its link graph from ``/``."""
    sources = {
        "/" + path.relative_to(docs).as_posix(): path
        for section in sections
        for path in sorted((docs / section).rglob("*.html"))
    }
    if not sources:
        raise FileNotFoundError(f"no HTML pages for {sections} under {docs}")
    served = {*sources, "/index.html"}
    bodies: dict[str, bytes] = {}
    for path, source in sources.items():
        text = source.read_text(encoding="utf-8", errors="replace")
        bodies[path] = close_links(path, text, served).encode()
    bodies["/index.html"] = home_page(f"Python documentation: {', '.join(sections)}", sections)
    if robots_txt is not None:
        bodies["/robots.txt"] = robots_txt.encode()
    for path, body in bodies.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    (root / "404.html").write_bytes(NOT_FOUND_PAGE)
    sizes = {path: len(body) for path, body in bodies.items()}
    sizes["/"] = sizes["/index.html"]
    links = {path: page_links(path, body) for path, body in bodies.items() if is_html(path)}
    links["/"] = links["/index.html"]
    site = Site(root=root, sizes=sizes, links=links, disallowed=disallowed)
    walk(site)
    return site


def walk(site: Site) -> None:
    """Fill ``site.pages`` and ``site.broken``: what a crawl from ``/`` reaches."""
    seen = {"/"}
    todo = ["/"]
    while todo:
        path = todo.pop()
        if path not in site.sizes or path == "/robots.txt":
            site.broken.add(path)
            continue
        site.pages.add(path)
        for target in site.links.get(path, []):
            if target not in seen and site.allowed(target):
                seen.add(target)
                todo.append(target)


def static_page(title: str, hrefs: Iterable[str], padding: int) -> bytes:
    items = "\n".join(f'<li><a href="{href}">{html.escape(href)}</a></li>' for href in hrefs)
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * (padding // 57 + 1)
    return (
        f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n<ul>\n{items}\n</ul>\n<p>{text}</p>\n"
        "</body></html>\n"
    ).encode()


def build_static_site(root: Path, pages: int = 120, broken: int = 12, seed: int = 0) -> Site:
    """A generated static site for the limiters' hosts: a home page linking every
    tenth page and ``broken`` missing ones (404), and ``pages`` pages of about 2 KB,
    each linking the next two and two others (seeded), so that a crawl that follows
    links reaches them all and one lost page never cuts the chain. No robots.txt."""
    import random

    rng = random.Random(seed)
    bodies: dict[str, bytes] = {}
    home = [f"p/{i}.html" for i in range(0, pages, 10)]
    home += [f"missing/{k}.html" for k in range(broken)]
    bodies["/index.html"] = static_page("A static site", home, 200)
    for i in range(pages):
        targets = [j for j in (i + 1, i + 2) if j < pages]
        targets += rng.sample(range(pages), min(2, pages))
        hrefs = [f"{j}.html" for j in targets] + ["../index.html"]
        bodies[f"/p/{i}.html"] = static_page(f"Page {i}", hrefs, 2000)
    for path, body in bodies.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    (root / "404.html").write_bytes(NOT_FOUND_PAGE)
    sizes = {path: len(body) for path, body in bodies.items()}
    sizes["/"] = sizes["/index.html"]
    links = {path: page_links(path, body) for path, body in bodies.items()}
    links["/"] = links["/index.html"]
    site = Site(root=root, sizes=sizes, links=links)
    walk(site)
    return site
