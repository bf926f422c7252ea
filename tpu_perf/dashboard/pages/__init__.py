"""One module per dashboard page, each with `render()`."""
