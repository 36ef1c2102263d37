"""The example's ScrapeTitle: Firecrawl is replaced by a title made from the URL."""

from graphbook import output, param, step


@step("Custom/ScrapeTitle")
@param("api_key", type="resource")
@output("out")
def scrape_page(ctx, url: str):
    """Scrapes a page's title. Like the example it returns the title from on_data, which
    Graphbook ignores: the step passes the URL on."""
    page_title = f"Title of {url.rstrip('/').rsplit('/', 1)[-1]} ({len(ctx.api_key)})"
    ctx.log(f"Scraped page title: {page_title}")
    return page_title
