"""The planner's web pages (`/ui`): server-rendered over the feature services, with vendored uPlot."""
