"""The trajectory viewer: an index of a trajectory folder, the numbers behind each chart, the Streamlit
pages, and the launcher that warms it up."""
