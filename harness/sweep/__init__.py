"""One sweep's runner side: the Hydra callbacks, the console and the directory lock."""
