"""From a run's records to the numbers people decide on: the summary, the simulated pipeline
bubble, and SimAI's analytical pipeline terms beside it."""

from .bubble import pipeline_bubble
from .simai import SIMAI_BUBBLE_FORMULA, simai_pipeline_terms

__all__ = ["SIMAI_BUBBLE_FORMULA", "pipeline_bubble", "simai_pipeline_terms"]
