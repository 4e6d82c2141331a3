"""Integrations of qattn with other libraries (imported on demand: `import qattn.integrations.transformers`)."""
