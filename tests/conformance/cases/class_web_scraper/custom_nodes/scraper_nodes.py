"""examples/workflows/class-based/web_scraper's node files in shape (WebsiteScraper.json and
PageScraper.json in one workflow): an in-memory site instead of requests/BeautifulSoup, a title
or mission made from the URL instead of Firecrawl. The crawler keeps its links in a dict
(discovery order) where the example uses a set (arbitrary order).
"""

from urllib.parse import urljoin, urlparse

from graphbook.core.resources import Resource
from graphbook.core.steps import GeneratorSourceStep, SourceStep, Step

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


class UrlSource(SourceStep):
    """Stores a web page URL; load() returns a bare value for its pin (Graphbook lists it)."""

    RequiresInput = False
    Parameters = {"url": {"type": "string", "default": "https://www.graphbook.ai/"}}
    Outputs = ["url"]
    Category = "Custom"

    def __init__(self, url):
        super().__init__()
        self.url = url

    def load(self):
        return {"url": self.url}

    def route(self, data: dict) -> str:
        return "url"


class ScrapeMission(Step):
    """Scrapes a page's mission statement (made from the URL); the return value is ignored."""

    RequiresInput = True
    Parameters = {"api_key": {"type": "resource"}}
    Outputs = ["out"]
    Category = "Custom"

    def __init__(self, api_key: str):
        super().__init__()
        self.api_key = api_key

    def on_data(self, url: str):
        mission_statement = f"Mission of {urlparse(url).netloc}"
        self.log(f"Scraped mission statement: {mission_statement}")
        return mission_statement
