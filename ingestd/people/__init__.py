"""People who reach their documents (issue 31): who they are (``accounts``), what each
capability set lets them do (``capabilities``). The web console and the WebDAV mount ask
here; nothing else decides who may see a tenant's documents."""
