"""The run viewer's static files (index.html, app.js, app.css), served at ``/ui``."""
