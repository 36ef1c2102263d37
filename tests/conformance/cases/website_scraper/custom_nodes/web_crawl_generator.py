"""The functional web_scraper example's crawler, over an in-memory site instead of requests."""

from urllib.parse import urljoin, urlparse

from graphbook import output, param, source, step

PAGES = {
    "https://example.org/": ["/about", "/docs/", "https://other.example.com/x", "#top"],
    "https://example.org/about": ["/", "/team"],
    "https://example.org/docs/": ["intro", "../about", "/docs/deep/a"],
    "https://example.org/docs/intro": ["/docs/deep/a"],
    "https://example.org/docs/deep/a": ["b"],
    "https://example.org/docs/deep/b": ["/secret"],
    "https://example.org/team": [],
}


@step("Custom/WebScrawlGenerator")
@source(is_generator=True)
@param("url", type="string", default="https://www.graphbook.ai/")
@param("max_depth", type="number", default=3)
@output("out")
def web_crawl_generator(ctx):
    """Crawl all links on a page with depth control; yields each same-site URL (a str note).

    The example keeps the links in a set (arbitrary order); a dict keeps them in discovery
    order so the run is reproducible.
    """
    base_url = ctx.url
    max_depth = ctx.max_depth
    visited_urls = set()
    all_links = {}

    def recursive_crawl(url, current_depth):
        if current_depth > max_depth or url in visited_urls:
            return
        try:
            visited_urls.add(url)
            if url not in PAGES:  # requests' raise_for_status() on a 404
                raise LookupError(f"404 Client Error: Not Found for url: {url}")
            for href in PAGES[url]:
                absolute_url = urljoin(url, href)
                if urlparse(absolute_url).netloc == urlparse(base_url).netloc:
                    all_links[absolute_url] = None
                    if absolute_url not in visited_urls:
                        recursive_crawl(absolute_url, current_depth + 1)
        except LookupError as e:
            print(f"Error crawling {url}: {e}")

    recursive_crawl(base_url, 0)
    for link in all_links:
        yield {"out": link}
