"""Adapters that run spec_edge's ops inside other engines (``spec_edge.integrations.vllm``)."""
