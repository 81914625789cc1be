"""What params.yaml says, validated: run specs, the run sheet, studies, registries and
the plug-in contract. No torch: the workflow imports this package when it parses."""
