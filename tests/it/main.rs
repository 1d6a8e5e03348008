mod sim_actors;
mod sim_server;
