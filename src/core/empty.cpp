// Placeholder translation unit for modules that have no sources yet.
