"""examples/workflows/python/WebsiteScraper.py in shape: a GeneratorSourceStep class crawling
(an in-memory site instead of requests/BeautifulSoup), a Resource class holding an API key, a
Step whose on_data returns the page title (Graphbook ignores it: the URL passes on).

The example keeps the links in a set (arbitrary order); a dict keeps discovery order here.
"""

from urllib.parse import urljoin, urlparse

import graphbook as gb
from graphbook.core.resources import Resource
from graphbook.core.steps import GeneratorSourceStep, Step

PAGES = {
    "https://example.org/": ["/about", "/docs/", "https://other.example.com/x"],
    "https://example.org/about": ["/", "/team", "/missing"],
    "https://example.org/docs/": ["intro", "../about"],
    "https://example.org/docs/intro": ["/docs/deep/a"],
    "https://example.org/docs/deep/a": [],
    "https://example.org/team": ["/about"],
}


class WebCrawlGenerator(GeneratorSourceStep):
    """Crawl all links on a webpage with depth control."""

    RequiresInput = False
    Parameters = {
        "url": {"type": "string", "default": "https://www.graphbook.ai/"},
        "max_depth": {"type": "number", "default": 3},
    }
    Outputs = ["out"]
    Category = "Custom"

    def __init__(self, url: str, max_depth: int):
        super().__init__()
        self.base_url = url
        self.max_depth = max_depth
        self.visited_urls = set()
        self.all_links = {}

    def recursive_crawl(self, url, current_depth):
        if current_depth > self.max_depth or url in self.visited_urls:
            return
        try:
            self.visited_urls.add(url)
            if url not in PAGES:  # requests' raise_for_status() on a 404
                raise LookupError(f"404 Client Error: Not Found for url: {url}")
            for href in PAGES[url]:
                absolute_url = urljoin(url, href)
                if urlparse(absolute_url).netloc == urlparse(self.base_url).netloc:
                    self.all_links[absolute_url] = None
                    if absolute_url not in self.visited_urls:
                        self.recursive_crawl(absolute_url, current_depth + 1)
        except LookupError as e:
            print(f"Error crawling {url}: {e}")

    def load(self):
        self.recursive_crawl(self.base_url, 0)
        for link in self.all_links:
            yield {"out": link}


class PersonalInfo(Resource):
    """Stores the user's API key (calls Resource.__init__ with no value; value() overrides)."""

    RequiresInput = False
    Parameters = {"api_key": {"type": "string", "default": "<API_KEY_HERE>"}}
    Outputs = ["api_key"]
    Category = "Custom"

    def __init__(self, api_key):
        super().__init__()
        self.api_key = api_key

    def value(self) -> str:
        return self.api_key


class ScrapeTitle(Step):
    """Scrapes a page's title (a title made from the URL instead of Firecrawl)."""

    RequiresInput = True
    Parameters = {"api_key": {"type": "resource"}}
    Outputs = ["out"]
    Category = "Custom"

    def __init__(self, api_key: str):
        super().__init__()
        self.api_key = api_key

    def on_data(self, url: str):
        page_title = f"Title of {url.rstrip('/').rsplit('/', 1)[-1]} ({len(self.api_key)})"
        self.log(f"Scraped page title: {page_title}")
        return page_title


g = gb.Graph()


@g()
def _():
    web_crawl_generator = g.step(WebCrawlGenerator)
    personal_info = g.resource(PersonalInfo)
    scrape_title = g.step(ScrapeTitle)

    web_crawl_generator.param("url", "https://example.org/")
    web_crawl_generator.param("max_depth", 3)
    personal_info.param("api_key", "<API_KEY_HERE>")

    scrape_title.param("api_key", personal_info)
    scrape_title.bind(web_crawl_generator, "out")


if __name__ == "__main__":
    g.run()
