from graphbook import param, resource


@resource("Custom/PersonalInfo")
@param("api_key", type="string", default="<API_KEY_HERE>")
def url_source(ctx):
    """The user's Firecrawl API key (the example names the function url_source too)."""
    return ctx.api_key
