"""One module per dashboard page, each with `render()`.

Not named `pages/`: a `pages/` folder next to a Streamlit entry script turns on Streamlit's
folder-based navigation, which would fight `st.navigation` for the URLs.
"""
