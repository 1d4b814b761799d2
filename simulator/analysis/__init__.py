"""Analyses beside the simulation: SimAI's analytical pipeline terms, the simulated bubble."""

from .bubble import pipeline_bubble
from .simai import SIMAI_BUBBLE_FORMULA, simai_pipeline_terms

__all__ = ["SIMAI_BUBBLE_FORMULA", "pipeline_bubble", "simai_pipeline_terms"]
