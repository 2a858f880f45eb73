"""The web console (issue 31): people reach their tenants' documents in a browser.

Server-rendered pages (Starlette, Jinja2 with autoescape), no script needed on any page.
Every page asks ingestd/people for who is logged in and what their capability set lets
them do in the tenant of the URL; a tenant they are no member of answers 404, as does a
document of another tenant (the tenant is in every query). Views and downloads are audit
entries in the tenant's chain.
"""
