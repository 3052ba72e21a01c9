"""The operator pages: server-rendered Jinja2 templates, a little plain JavaScript and CSS, no build step."""
