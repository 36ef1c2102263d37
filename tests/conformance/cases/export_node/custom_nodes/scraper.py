"""Offline stand-ins for the web_scraper example's nodes (same decorators, pins and note shapes)."""

from graphbook import output, param, resource, source, step


@step("Custom/UrlSource")
@source()
@param("url", type="string", default="https://www.graphbook.ai/")
@output("url")
def url_source(ctx):
    yield {"url": ctx.url}


@resource("Custom/PersonalInfo")
@param("api_key", type="string", default="<API_KEY_HERE>")
def personal_info(ctx):
    return ctx.api_key


@step("Custom/ScrapeMission")
@param("api_key", type="resource")
def scrape_mission(ctx, url):
    """The example calls the Firecrawl API with the key; offline, the page name stands in."""
    return {
        "out": {
            "url": url,
            "mission": "page " + url.rsplit("/", 1)[-1],
            "key_len": len(ctx.api_key),
        }
    }
