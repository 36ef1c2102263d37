"""Offline stand-ins for the web_scraper example's nodes (same decorators and pins)."""
from graphbook import step, source, param, resource


@step("UrlSource")
@source(is_generator=False)
@param("url", type="string", default="https://example.org")
def url_source(ctx):
    return {"url": [{"url": ctx.url}]}


@resource("PersonalInfo")
@param("api_key", type="string", default="")
def personal_info(ctx):
    return {"api_key": ctx.api_key}


@step("ScrapeMission")
@param("api_key", type="resource")
def scrape_mission(ctx, data):
    data["mission"] = "page " + data["url"].rsplit("/", 1)[-1]
    data["key_len"] = len(ctx.api_key["api_key"])
